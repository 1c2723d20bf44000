// torch_bench: what edl::torch costs and gains on the libtorch ResNet20 (examples/torch/resnet20.h),
// training on random Fashion-MNIST-shaped batches (1x28x28, 10 classes), each worker a forked process
// with --threads intra-op threads:
//   workers 1  plain           torch SGD alone (no EDL): the baseline
//   workers 1  edl             the same through edl::torch::DistributedOptimizer in an edl::init()
//                              world of one (hooks, gradient copies, bookkeeping): overhead, target <= 3%.
//                              Both run in ONE process, their steps interleaved (mode "overhead"), so
//                              that a shared machine's load hits both alike; "ok" = identical parameters.
//                              The overhead is the median over the --pair-iters step pairs of
//                              (edl step / the plain step next to it) - 1: a drift of the machine's
//                              load cancels in each pair (the JSON field overhead_pct of the edl row)
//   workers 2  independent     two plain copies side by side, no communication: the ceiling for 2 workers
//   workers 2  barrier         the same two copies meeting in a blocking pipe barrier after every step
//                              (no EDL): the ceiling for any synchronous training; under load from
//                              outside (another process on the cores) the lockstep costs it like edl
//   workers 2  edl             2 ranks, EDL allreduce overlapped with backward (the default)
//   workers 2  edl-no-overlap  the same with every bucket launched by step()
// images_per_s = workers * batch / step time (the median over --iters steps after --warmup, the
// slowest rank's median); step_ms is that step time. Every EDL row also checks that both ranks end
// with bitwise identical parameters ("ok"); the overlap column is the share of the allreduce time
// hidden behind backward (edl::OptimizerStepStats). Where the CPU goes (per timed step, averaged
// over the ranks; /proc/self/task, Linux): cpu_ms, the CPU time of all the worker's threads (the
// overhead mode: both copies); bg_cpu_ms, that of the threads other than the training thread (EDL's
// engine and transport; torch runs with --threads 1); preempt, how often the training thread was
// preempted (involuntary context switches).
//
// --device cuda: models, data and reductions on the GPU (edl::torch's CUDA path); step times end
// with torch::cuda::synchronize(); 2 workers share GPU 0, each with its own NCCL_HOSTID (behaviour
// only: they compete for one GPU). JSON rows carry device and commit (--commit).
// --model resnet50: ResNet-50 (examples/torch/resnet50.h) on random 3x224x224 batches, 1000 classes.
//
//   torch_bench [--batch 32] [--threads 1] [--warmup 3] [--iters 20] [--pair-iters 60] [--modes LIST]
//               [--device cpu|cuda] [--model resnet20|resnet50] [--commit SHA] [--json PATH]
//   (--modes overhead,independent,barrier,edl,edl-no-overlap)
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <edl/edl.h>
#include <edl/store_server.h>
#include <edl/torch.h>

#include "common/bench_util.h"
#include "resnet20.h"
#include "resnet50.h"
#include "testing/process.h"

namespace {

using edl::bench::Json;
using edl::bench::now_s;
using edl::bench::read_all;

struct Config {
  int batch = 32, threads = 1, warmup = 3, iters = 20, pair_iters = 60;
  std::string device = "cpu";
  std::string model = "resnet20";
};

struct Mode {
  std::string name;
  int workers;
  bool edl;
  bool overlap;
  bool paired;  // 1 worker: also a plain copy in the same process, steps interleaved
  bool barrier = false;  // plain copies that wait for each other after every step (pipe barrier)
};

// The barrier mode's pipes: write one byte to every other rank, read one from each (blocking).
struct PipeBarrier {
  std::vector<int> to, from;  // to[p] / from[p]: this rank's ends towards rank p (-1 for itself)
  void wait() const {
    char b = 0;
    for (int fd : to)
      if (fd >= 0 && write(fd, &b, 1) != 1) throw std::runtime_error("barrier write failed");
    for (int fd : from)
      if (fd >= 0 && read(fd, &b, 1) != 1) throw std::runtime_error("barrier read failed");
  }
};

// What a child reports: its median step time, the median overlap fraction, a parameter checksum.
struct Report {
  double step_s = 0;
  double base_step_s = 0;  // paired mode: the plain copy's median step
  double overlap = 0;
  double checksum = 0;
  double base_checksum = 0;  // paired mode: the plain copy's (EDL in a world of 1 must match it)
  double pair_ratio = 0;     // paired mode: median over the step pairs of edl step / plain step
  double cpu_s = 0;          // per timed step: CPU time of all the worker's threads
  double bg_cpu_s = 0;       // per timed step: CPU time of the threads other than the training thread
  double preempt = 0;        // per timed step: involuntary context switches of the training thread
};

// CPU time of the calling thread and of this process's other threads (schedstat), and the calling
// thread's involuntary context switches.
struct ThreadUsage {
  double self_s = 0;
  double others_s = 0;
  double preemptions = 0;
};

ThreadUsage thread_usage() {
  ThreadUsage u;
  const std::string self = std::to_string(syscall(SYS_gettid));
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::ifstream f(e.path() / "schedstat");
    double run_ns = 0;
    if (!(f >> run_ns)) continue;
    if (e.path().filename() != self) {
      u.others_s += run_ns * 1e-9;
      continue;
    }
    u.self_s = run_ns * 1e-9;
    std::ifstream st(e.path() / "status");
    std::string line;
    const std::string key = "nonvoluntary_ctxt_switches:";
    while (std::getline(st, line))
      if (line.compare(0, key.size(), key) == 0) u.preemptions = std::stod(line.substr(key.size()));
  }
  return u;
}

// One model + optimizer (+ the EDL wrapper) trained on a fixed random batch.
struct Trainer {
  Trainer(const Config& cfg, const Mode& mode) : device(edl::torch::training_device(cfg.device)) {
    const bool big = cfg.model == "resnet50";
    if (big) {
      edl_examples::ResNet50 m(1000);
      net = m.ptr();
      forward = [m](const torch::Tensor& x) mutable { return m->forward(x); };
    } else {
      edl_examples::ResNet20 m(1, 10);
      net = m.ptr();
      forward = [m](const torch::Tensor& x) mutable { return m->forward(x); };
    }
    net->to(device);
    images = (big ? torch::rand({cfg.batch, 3, 224, 224}) : torch::rand({cfg.batch, 1, 28, 28})) * 2 - 1;
    images = images.to(device);
    labels = torch::randint(0, big ? 1000 : 10, {cfg.batch}, torch::kLong).to(device);
    sgd = std::make_unique<torch::optim::SGD>(net->parameters(),
                                              torch::optim::SGDOptions(0.01).momentum(0.9).weight_decay(5e-4));
    if (mode.edl) {
      edl::torch::DistributedOptimizerOptions o;
      o.overlap = mode.overlap;
      o.scaling.lr_scaling = edl::optim::LrScaling::kNone;
      opt = std::make_unique<edl::torch::DistributedOptimizer>(*sgd, *net, o);
    }
  }
  double step() {  // seconds
    const double t0 = now_s();
    sgd->zero_grad();
    torch::nn::functional::cross_entropy(forward(images), labels).backward();
    if (opt) {
      opt->step();
    } else {
      sgd->step();
    }
    if (device.is_cuda()) torch::cuda::synchronize();  // the step's device work is part of its time
    return now_s() - t0;
  }
  double checksum() {
    double c = 0;
    for (const auto& p : net->parameters()) c += p.detach().to(torch::kDouble).abs().sum().item<double>();
    return c;
  }
  std::shared_ptr<torch::nn::Module> net;
  std::function<torch::Tensor(const torch::Tensor&)> forward;
  torch::Device device;
  torch::Tensor images, labels;
  std::unique_ptr<torch::optim::SGD> sgd;
  std::unique_ptr<edl::torch::DistributedOptimizer> opt;
};

// One worker: joins the world (EDL modes), trains warmup + iters steps, reports. The paired mode
// (1 worker) trains a plain copy and an EDL copy of the same model in one process, alternating their
// steps (and their order), so that the load of a shared machine hits both alike.
Report train(const Config& cfg, const Mode& mode, const PipeBarrier* barrier) {
  torch::set_num_threads(cfg.threads);
  torch::manual_seed(42);  // the same parameters and data on every rank
  Trainer main(cfg, mode);
  std::unique_ptr<Trainer> plain;
  if (mode.paired) {
    torch::manual_seed(42);
    plain = std::make_unique<Trainer>(cfg, Mode{"plain", 1, false, true, false});
  }
  std::vector<double> times, base_times, overlaps, ratios;
  const int iters = plain ? cfg.pair_iters : cfg.iters;
  ThreadUsage start;
  for (int i = 0; i < cfg.warmup + iters; ++i) {
    if (i == cfg.warmup) start = thread_usage();
    double t = 0, b = 0;
    if (plain && i % 2 == 1) b = plain->step();
    t = main.step();
    if (barrier) {
      const double t0 = now_s();
      barrier->wait();
      t += now_s() - t0;
    }
    if (plain && i % 2 == 0) b = plain->step();
    if (i >= cfg.warmup) {
      times.push_back(t);
      if (plain) {
        base_times.push_back(b);
        ratios.push_back(t / b);
      }
      if (main.opt) overlaps.push_back(main.opt->reducer().last_step_stats().overlap_fraction());
    }
  }
  Report r;
  r.step_s = edl::bench::median(times);
  r.base_step_s = plain ? edl::bench::median(base_times) : 0;
  r.pair_ratio = plain ? edl::bench::median(ratios) : 0;
  const ThreadUsage end = thread_usage();
  r.bg_cpu_s = (end.others_s - start.others_s) / std::max(1, iters);
  r.cpu_s = r.bg_cpu_s + (end.self_s - start.self_s) / std::max(1, iters);
  r.preempt = (end.preemptions - start.preemptions) / std::max(1, iters);
  r.overlap = overlaps.empty() ? 0 : edl::bench::median(overlaps);
  r.checksum = main.checksum();
  r.base_checksum = plain ? plain->checksum() : r.checksum;
  return r;
}

[[noreturn]] void child(const Config& cfg, const Mode& mode, int rank, int url_fd, int out_fd,
                        const PipeBarrier* barrier) {
  int code = 1;
  try {
    if (mode.edl && mode.workers > 1) {
      char url[256] = {0};
      if (!read_all(url_fd, url, sizeof url, now_s() + 60)) _exit(3);
      setenv("EDL_STORE", url, 1);
      setenv("EDL_RANK", std::to_string(rank).c_str(), 1);
      setenv("EDL_SIZE", std::to_string(mode.workers).c_str(), 1);
      setenv("EDL_LOG_LEVEL", "0", 1);
    }
    // Ranks sharing one GPU: NCCL accepts them as different hosts (edl-run --one-gpu-test does the same).
    if (cfg.device == "cuda" && mode.workers > 1) setenv("NCCL_HOSTID", ("torch_bench-rank" + std::to_string(rank)).c_str(), 1);
    if (mode.edl) edl::init();
    Report r = train(cfg, mode, mode.barrier ? barrier : nullptr);
    if (write(out_fd, &r, sizeof r) == static_cast<ssize_t>(sizeof r)) code = 0;
    if (mode.edl) edl::shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "torch_bench worker %d: %s\n", rank, e.what());
    code = 2;
  }
  _exit(code);
}

// Runs one mode: forks its workers (before any thread exists here), starts a store when they need
// one, collects the reports. Throws when a worker fails.
std::vector<Report> run_mode(const Config& cfg, const Mode& mode) {
  const int n = mode.workers;
  std::vector<std::array<int, 2>> url(n), out(n);
  std::vector<pid_t> pids(n);
  // pipe[a][b]: rank a writes to rank b (barrier mode only)
  std::vector<std::vector<std::array<int, 2>>> pipes(n, std::vector<std::array<int, 2>>(n, {-1, -1}));
  std::vector<PipeBarrier> barriers(n);
  for (int a = 0; mode.barrier && a < n; ++a)
    for (int b = 0; b < n; ++b)
      if (a != b && pipe(pipes[a][b].data()) != 0) throw std::runtime_error("pipe failed");
  for (int r = 0; r < n; ++r)
    for (int p = 0; p < n; ++p) {
      barriers[r].to.push_back(pipes[r][p][1]);
      barriers[r].from.push_back(pipes[p][r][0]);
    }
  for (int r = 0; r < n; ++r) {
    if (pipe(url[r].data()) != 0 || pipe(out[r].data()) != 0) throw std::runtime_error("pipe failed");
    edl::testing::SpawnOptions so;
    so.own_group = false;
    pids[r] = edl::testing::fork_call([&]() -> int { child(cfg, mode, r, url[r][0], out[r][1], &barriers[r]); }, so);
    close(url[r][0]);
    close(out[r][1]);
  }
  for (auto& row : pipes)
    for (auto& fds : row)
      for (int fd : fds)
        if (fd >= 0) close(fd);
  std::vector<Report> reports(n);
  std::vector<bool> ok(n, false);
  {
    std::unique_ptr<edl::StoreServer> server;
    if (mode.edl && n > 1) {
      server = std::make_unique<edl::StoreServer>();
      char u[256] = {0};
      std::strncpy(u, server->url().c_str(), sizeof u - 1);
      for (int r = 0; r < n; ++r) (void)!write(url[r][1], u, sizeof u);
    }
    const double deadline = now_s() + 600;
    for (int r = 0; r < n; ++r) ok[r] = read_all(out[r][0], &reports[r], sizeof(Report), deadline);
  }
  std::string failed;
  for (int r = 0; r < n; ++r) {
    if (!ok[r]) kill(pids[r], SIGKILL);
    int status = 0;
    waitpid(pids[r], &status, 0);
    close(url[r][1]);
    close(out[r][0]);
    if (!ok[r]) failed += " rank " + std::to_string(r) + " (status " + std::to_string(edl::testing::exit_status(status)) + ")";
  }
  if (!failed.empty()) throw std::runtime_error("mode " + mode.name + ": worker failed:" + failed);
  return reports;
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("torch_bench", "edl::torch overhead, 2-worker speedup and overlap on the libtorch ResNet20");
  options.add_options()("batch", "images per worker per step", cxxopts::value<int>()->default_value("32"))(
      "threads", "intra-op threads per worker", cxxopts::value<int>()->default_value("1"))(
      "warmup", "untimed steps", cxxopts::value<int>()->default_value("3"))(
      "iters", "timed steps", cxxopts::value<int>()->default_value("20"))(
      "pair-iters", "timed step pairs of the overhead mode", cxxopts::value<int>()->default_value("60"))(
      "modes", "comma-separated: overhead (1 worker, plain and edl interleaved), independent, barrier, edl, edl-no-overlap (2 workers)",
      cxxopts::value<std::string>()->default_value("overhead,independent,barrier,edl,edl-no-overlap"))(
      "device", "cpu or cuda", cxxopts::value<std::string>()->default_value("cpu"))(
      "model", "resnet20 (1x28x28) or resnet50 (3x224x224)", cxxopts::value<std::string>()->default_value("resnet20"))(
      "commit", "the commit measured (JSON field commit)", cxxopts::value<std::string>()->default_value(""))(
      "json", "append one JSON object per row to PATH", cxxopts::value<std::string>()->default_value(""))(
      "help", "usage");
  auto args = edl::bench::parse_flags(options, argc, argv);
  if (args.count("help")) {
    std::cout << options.help() << std::endl;
    return 0;
  }
  Config cfg;
  cfg.batch = args["batch"].as<int>();
  cfg.threads = args["threads"].as<int>();
  cfg.warmup = args["warmup"].as<int>();
  cfg.iters = args["iters"].as<int>();
  cfg.pair_iters = args["pair-iters"].as<int>();
  cfg.device = args["device"].as<std::string>();
  if (cfg.device != "cpu" && cfg.device != "cuda") {
    std::fprintf(stderr, "torch_bench: --device must be cpu or cuda, got '%s'\n", cfg.device.c_str());
    return 2;
  }
  cfg.model = args["model"].as<std::string>();
  if (cfg.model != "resnet20" && cfg.model != "resnet50") {
    std::fprintf(stderr, "torch_bench: --model must be resnet20 or resnet50, got '%s'\n", cfg.model.c_str());
    return 2;
  }
  const std::string commit = args["commit"].as<std::string>();
  const std::vector<Mode> all = {{"overhead", 1, true, true, true},
                                 {"independent", 2, false, true, false},
                                 {"barrier", 2, false, true, false, true},
                                 {"edl", 2, true, true, false},
                                 {"edl-no-overlap", 2, true, false, false}};
  std::vector<Mode> modes;
  for (const auto& name : edl::bench::split(args["modes"].as<std::string>())) {
    bool found = false;
    for (const auto& m : all) found = found || (m.name == name && (modes.push_back(m), true));
    if (!found) {
      std::fprintf(stderr, "torch_bench: unknown mode '%s' (run with --help for usage)\n", name.c_str());
      return 2;
    }
  }
  edl::bench::JsonRows json(args["json"].as<std::string>());
  edl::bench::Table table(
      {"model", "workers", "mode", "images/s", "step_ms", "vs_plain_1", "overlap", "cpu_ms", "bg_cpu_ms", "preempt", "ok"},
      15);
  table.header();
  double base_ips = 0;
  int failures = 0;
  struct Extra {
    double overhead_pct = std::nan("");
    double cpu_s = 0, bg_cpu_s = 0, preempt = 0;
  };
  auto emit = [&](int workers, const std::string& mode, double step_s, double overlap, bool edl, bool ok,
                  const Extra& x) {
    const double ips = workers * cfg.batch / step_s;
    if (mode == "plain") base_ips = ips;
    const double vs = base_ips > 0 ? ips / base_ips : 0;
    failures += ok ? 0 : 1;
    table.row({cfg.model, std::to_string(workers), mode, edl::bench::fmt(ips, 1), edl::bench::fmt(step_s * 1e3, 1),
               base_ips > 0 ? edl::bench::fmt(vs, 3) : "-", edl ? edl::bench::fmt(overlap, 2) : "-",
               edl::bench::fmt(x.cpu_s * 1e3, 1), edl::bench::fmt(x.bg_cpu_s * 1e3, 2), edl::bench::fmt(x.preempt, 1),
               ok ? "ok" : "WRONG"});
    Json row;
    row["bench"] = "torch_bench";
    row["model"] = cfg.model;
    row["workers"] = workers;
    row["mode"] = mode;
    row["images_per_s"] = ips;
    row["step_ms"] = step_s * 1e3;
    row["vs_plain_1"] = vs;
    row["overlap"] = overlap;
    row["batch"] = cfg.batch;
    row["threads"] = cfg.threads;
    row["ok"] = ok;
    row["device"] = cfg.device;
    if (!commit.empty()) row["commit"] = commit;
    if (!std::isnan(x.overhead_pct)) row["overhead_pct"] = x.overhead_pct;
    row["cpu_ms"] = x.cpu_s * 1e3;
    row["bg_cpu_ms"] = x.bg_cpu_s * 1e3;
    row["preempt"] = x.preempt;
    json.write(row);
  };
  for (const auto& m : modes) {
    std::vector<Report> rep;
    try {
      rep = run_mode(cfg, m);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "torch_bench: %s\n", e.what());
      ++failures;
      continue;
    }
    if (m.paired) {  // EDL in a world of one must train exactly like plain libtorch
      const bool same = rep[0].checksum == rep[0].base_checksum && std::isfinite(rep[0].checksum);
      const double overhead = (rep[0].pair_ratio - 1) * 100;
      // One process: its background threads and preemptions belong to both copies alike.
      // cpu_ms: both copies together.
      const Extra x{overhead, rep[0].cpu_s, rep[0].bg_cpu_s, rep[0].preempt};
      Extra plain_x = x;
      plain_x.overhead_pct = std::nan("");
      emit(1, "plain", rep[0].base_step_s, 0, false, std::isfinite(rep[0].base_checksum), plain_x);
      emit(1, "edl", rep[0].step_s, rep[0].overlap, true, same, x);
      std::printf("  overhead of edl::torch at 1 worker: %+.1f%% step time (median of %d step pairs; the"
                  " medians above: %+.1f%%; target <= 3%%)\n",
                  overhead, cfg.pair_iters, (rep[0].step_s / rep[0].base_step_s - 1) * 100);
      continue;
    }
    double step_s = 0, overlap = 0;
    Extra x;
    for (const auto& r : rep) {
      step_s = std::max(step_s, r.step_s);
      overlap += r.overlap / rep.size();
      x.bg_cpu_s += r.bg_cpu_s / rep.size();
      x.cpu_s += r.cpu_s / rep.size();
      x.preempt += r.preempt / rep.size();
    }
    // Ranks of one EDL world must hold the same parameters; independent copies start equal and
    // train on equal data, so they match too.
    bool ok = true;
    for (const auto& r : rep) ok = ok && r.checksum == rep[0].checksum && std::isfinite(r.checksum);
    emit(m.workers, m.name, step_s, overlap, m.edl, ok, x);
  }
  return failures == 0 ? 0 : 1;
}
