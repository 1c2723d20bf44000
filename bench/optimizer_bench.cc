// optimizer_bench: does DistributedOptimizer hide gradient allreduce behind the backward pass?
//
//   optimizer_bench [--ranks 2] [--rounds 8] [--steps 5] [--warmup 2] [--backward-ms 120]
//                   [--bucket-kb 256] [--fp16] [--json PATH]
//
// A synthetic model with ResNet20's parameter tensors (269,722 float32 parameters in 59 tensors:
// 3x3 convolutions of 16/32/64 channels, batch-norm weight + bias, fc 64x10 + 10) and a backward
// pass that produces the gradients layer by layer, last layer first, with busy compute between them
// (small GEMMs; each layer's share of --backward-ms follows its multiply-adds, calibrated once
// before the ranks start). Ranks run as threads of this process, each with its own Communicator
// (TCP loopback mesh bootstrapped through an in-process store) and its own optimizer: the sockets,
// the copies and the CPU contention are those of separate processes. Modes:
//   compute_only  the same backward + update with no communication (local optimizer);
//   no_overlap    buckets are launched by step(), after backward;
//   overlap       buckets are launched as soon as backward completes them.
// Rows: {"ranks","mode","step_ms"} per mode and {"ranks","overlap_fraction"}: the share of the
// allreduce time hidden behind backward = (part of each bucket's launch-to-completion interval
// that lies before the last grad_ready() of the step) / (sum of those intervals), from the
// optimizer's OptimizerStepStats, median over ranks and steps of the overlap mode. The summary line adds the
// end-to-end view: exposed communication (mode - compute_only) with and without overlap, and the
// best ratio perfect overlap could reach (compute_only / no_overlap).
// Correctness ("wrong" column): every rank fills gradient element i with (rank + 1) * f(i); after
// each step the bucket holds the reduced sum (fp32) or mean (fp16), checked on a sample of elements.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <cstdio>
#include <exception>
#include <functional>
#include <stdexcept>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cxxopts.hpp>

#include "common/bench_util.h"
#include "edl/communicator.h"
#include "edl/edl.h"
#include "edl/optim.h"
#include "edl/store.h"
#include "edl/store_server.h"

namespace {

using edl::bench::Json;

// One layer of the synthetic network: its parameter tensors (forward order) and its backward cost.
struct Layer {
  std::vector<size_t> counts;
  double macs = 0;  // multiply-adds per image (forward), the backward cost weight
};

std::vector<Layer> resnet20_layers() {
  std::vector<Layer> layers;
  auto conv = [&](int cin, int cout, int hw) {
    layers.push_back({{static_cast<size_t>(cin) * cout * 9}, static_cast<double>(cin) * cout * 9 * hw * hw});
  };
  auto bn = [&](int c, int hw) { layers.push_back({{static_cast<size_t>(c), static_cast<size_t>(c)}, 4.0 * c * hw * hw}); };
  conv(3, 16, 32);
  bn(16, 32);
  int cin = 16;
  const int widths[3] = {16, 32, 64}, sizes[3] = {32, 16, 8};
  for (int stage = 0; stage < 3; ++stage) {
    for (int block = 0; block < 3; ++block) {
      conv(cin, widths[stage], sizes[stage]);
      bn(widths[stage], sizes[stage]);
      conv(widths[stage], widths[stage], sizes[stage]);
      bn(widths[stage], sizes[stage]);
      cin = widths[stage];
    }
  }
  layers.push_back({{640, 10}, 640.0});
  return layers;
}

// Busy compute: `reps` 32x32x32 GEMMs on the caller's scratch (kept live so it is not optimised out).
struct Compute {
  std::vector<float> a, b, c;
  Compute() : a(32 * 32, 0.5f), b(32 * 32, 0.25f), c(32 * 32, 0.0f) {}
  void run(long reps) {
    for (long r = 0; r < reps; ++r) {
      for (int i = 0; i < 32; ++i)
        for (int k = 0; k < 32; ++k) {
          const float aik = a[i * 32 + k];
          for (int j = 0; j < 32; ++j) c[i * 32 + j] += aik * b[k * 32 + j];
        }
      a[r & 1023] = c[(r * 7) & 1023] * 1e-6f;
    }
  }
};

// Milliseconds per GEMM on an undisturbed core: the fastest of several short runs (the machine is
// shared; the slowest runs measure other people's jobs, not this kernel).
double calibrate_gemm_ms() {
  Compute c;
  c.run(200);
  const long reps = 500;
  double best = 1e9;
  for (int i = 0; i < 9; ++i) {
    double t0 = edl::bench::now_s();
    c.run(reps);
    best = std::min(best, (edl::bench::now_s() - t0) * 1e3 / reps);
  }
  return best;
}

float grad_value(size_t i) { return 0.001f * static_cast<float>((i * 37) % 101) - 0.05f; }

struct ModeResult {
  std::vector<double> steps_ms;  // per timed step: the slowest rank's step time
  std::vector<double> overlap;  // optimizer's measure per rank and step: hidden / comm
  std::vector<double> comm_ms;  // communication thread busy time per rank and step
  size_t buckets = 0;
  long wrong = 0;
};

struct BenchConfig {
  int ranks = 2;
  int steps = 5;
  int warmup = 2;
  double backward_ms = 120;
  size_t bucket_bytes = 256 << 10;
  bool fp16 = false;
  bool processes = false;
};

enum class Mode { kComputeOnly, kNoOverlap, kOverlap };

// Keeps compute_only ranks in lockstep like the communicating modes (an allreduce synchronises
// them): a step ends when every rank has finished it.
class StepBarrier {
 public:
  explicit StepBarrier(int n) : n_(n) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t gen = gen_;
    if (++count_ == n_) {
      count_ = 0;
      ++gen_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return gen_ != gen; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_;
  int count_ = 0;
  uint64_t gen_ = 0;
};

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::kComputeOnly: return "compute_only";
    case Mode::kNoOverlap: return "no_overlap";
    case Mode::kOverlap: return "overlap";
  }
  return "?";
}

// How a rank reaches its peers: its own Communicator (threads), or the edl::init() world (processes).
struct RankEnv {
  std::shared_ptr<edl::Communicator> comm;  // threads mode
  bool global_world = false;                // processes mode: the Runtime generation's engine
  std::function<void()> lockstep;           // compute_only: start every step together
};

// One rank: builds the synthetic model in the optimizer's gradient arena and runs the steps.
void run_rank(const BenchConfig& cfg, Mode mode, const RankEnv& env, int rank,
              const std::vector<Layer>& layers, const std::vector<long>& reps, std::vector<double>* step_ms,
              std::vector<double>* overlap, std::vector<double>* comm_ms, size_t* buckets, long* wrong) {
  edl::DistributedOptimizerOptions o;
  o.optimizer.momentum = 0.9;
  o.scaling.base_lr = 1e-6;
  o.scaling.lr_scaling = edl::optim::LrScaling::kNone;
  o.bucket_cap_bytes = cfg.bucket_bytes;
  o.overlap = mode == Mode::kOverlap;
  o.fp16_compression = cfg.fp16;
  if (mode == Mode::kComputeOnly) {
    o.local = true;
  } else if (!env.global_world) {
    o.comm = env.comm;
  }
  edl::DistributedOptimizer opt(o);
  std::vector<std::vector<float>> params;
  std::vector<std::vector<size_t>> layer_params(layers.size());
  for (size_t l = 0; l < layers.size(); ++l) {
    for (size_t count : layers[l].counts) {
      params.emplace_back(count, 0.01f);
      layer_params[l].push_back(opt.add_parameter("p" + std::to_string(params.size()), params.back().data(), nullptr,
                                                  count));
    }
  }
  *buckets = opt.num_buckets();
  Compute compute;
  const int world = mode == Mode::kComputeOnly ? 1 : cfg.ranks;
  const float factor = cfg.fp16 && world > 1 ? (world + 1) / 2.0f : world * (world + 1) / 2.0f;
  for (int s = 0; s < cfg.warmup + cfg.steps; ++s) {
    // The communicating modes are kept in lockstep by their allreduces; compute_only ranks start
    // every step together so that the per-step maximum over ranks compares like with like.
    if (mode == Mode::kComputeOnly && env.lockstep) env.lockstep();
    double t0 = edl::bench::now_s();
    for (size_t l = layers.size(); l-- > 0;) {  // backward: last layer first
      compute.run(reps[l]);
      for (size_t k = layer_params[l].size(); k-- > 0;) {
        size_t p = layer_params[l][k];
        float* g = opt.grad_slot(p);
        const size_t n = params[p].size();
        const float scale = static_cast<float>(rank + 1);
        for (size_t i = 0; i < n; ++i) g[i] = scale * grad_value(i);
        opt.grad_ready(p);
      }
    }
    opt.step();
    double ms = (edl::bench::now_s() - t0) * 1e3;
    {
      for (size_t p = 0; p < params.size(); p += 7) {
        const float* g = opt.grad_slot(p);
        for (size_t i = 0; i < params[p].size(); i += 61) {
          float expect = grad_value(i) * (mode == Mode::kComputeOnly ? static_cast<float>(rank + 1) : factor);
          if (std::fabs(g[i] - expect) > 1e-3f * std::fabs(expect) + 1e-4f) ++*wrong;
        }
      }
    }
    if (s >= cfg.warmup) {
      step_ms->push_back(ms);
      const auto& st = opt.last_step_stats();
      overlap->push_back(st.overlap_fraction());
      comm_ms->push_back(st.comm_s * 1e3);
    }
  }
}

ModeResult merge(const std::vector<std::vector<double>>& step_ms, const std::vector<std::vector<double>>& overlap,
                 const std::vector<std::vector<double>>& comm_ms, const std::vector<size_t>& buckets,
                 const std::vector<long>& wrong);

ModeResult run_mode(const BenchConfig& cfg, Mode mode, const std::vector<Layer>& layers, const std::vector<long>& reps,
                    int round) {
  const int n = cfg.ranks;  // compute_only runs as many ranks too: same CPU load, no communication
  auto store = edl::make_memory_store();
  const std::string prefix = std::string("optimizer_bench/") + mode_name(mode) + "/" + std::to_string(round) + "/";
  std::vector<std::vector<double>> step_ms(n), overlap(n), comm_ms(n);
  std::vector<size_t> buckets(n, 0);
  std::vector<long> wrong(n, 0);
  std::vector<std::exception_ptr> errors(n);
  StepBarrier barrier(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        RankEnv env;
        if (mode != Mode::kComputeOnly) env.comm = edl::Communicator::create(store, prefix, r, n);
        env.lockstep = [&barrier] { barrier.arrive_and_wait(); };
        run_rank(cfg, mode, env, r, layers, reps, &step_ms[r], &overlap[r], &comm_ms[r], &buckets[r], &wrong[r]);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return merge(step_ms, overlap, comm_ms, buckets, wrong);
}

ModeResult merge(const std::vector<std::vector<double>>& step_ms, const std::vector<std::vector<double>>& overlap,
                 const std::vector<std::vector<double>>& comm_ms, const std::vector<size_t>& buckets,
                 const std::vector<long>& wrong) {
  const int n = static_cast<int>(step_ms.size());
  ModeResult res;
  // A step ends when the slowest rank ends it: take the per-step maximum over ranks.
  std::vector<double> per_step(step_ms[0].size(), 0.0);
  for (int r = 0; r < n; ++r)
    for (size_t s = 0; s < per_step.size(); ++s) per_step[s] = std::max(per_step[s], step_ms[r][s]);
  res.steps_ms = per_step;
  for (int r = 0; r < n; ++r) {
    res.overlap.insert(res.overlap.end(), overlap[r].begin(), overlap[r].end());
    res.comm_ms.insert(res.comm_ms.end(), comm_ms[r].begin(), comm_ms[r].end());
  }
  res.buckets = buckets[0];
  for (long w : wrong) res.wrong += w;
  return res;
}

// --- processes mode: each rank is a forked process in an edl::init() world (the default setting
// of DistributedOptimizer: buckets go through the generation's collective engine) ----------------

bool read_all(int fd, void* buf, size_t n, double deadline_s) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    const int left_ms = static_cast<int>((deadline_s - edl::bench::now_s()) * 1e3);
    if (left_ms <= 0) return false;
    pollfd pfd{fd, POLLIN, 0};
    if (poll(&pfd, 1, left_ms) <= 0) continue;
    ssize_t r = read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool write_all(int fd, const void* buf, size_t n) {
  auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Wire record per (round, mode): steps, buckets, wrong, then steps x {step_ms, overlap, comm_ms}.
[[noreturn]] void child_main(const BenchConfig& cfg, int rank, int url_fd, int out_fd, const std::vector<Layer>& layers,
                             const std::vector<long>& reps, int rounds, const std::vector<Mode>& order) {
  int code = 1;
  try {
    char url[256] = {0};
    if (!read_all(url_fd, url, sizeof url, edl::bench::now_s() + 60)) _exit(3);
    setenv("EDL_STORE", url, 1);
    setenv("EDL_RANK", std::to_string(rank).c_str(), 1);
    setenv("EDL_SIZE", std::to_string(cfg.ranks).c_str(), 1);
    setenv("EDL_LOG_LEVEL", "0", 1);
    edl::init();
    RankEnv env;
    env.global_world = true;
    env.lockstep = [] { edl::barrier(); };
    for (Mode mode : order) {
      std::vector<double> step_ms, overlap, comm_ms;
      size_t buckets = 0;
      long wrong = 0;
      run_rank(cfg, mode, env, rank, layers, reps, &step_ms, &overlap, &comm_ms, &buckets, &wrong);
      uint64_t head[3] = {step_ms.size(), buckets, static_cast<uint64_t>(wrong)};
      bool ok = write_all(out_fd, head, sizeof head);
      for (size_t i = 0; ok && i < step_ms.size(); ++i) {
        double row[3] = {step_ms[i], overlap[i], comm_ms[i]};
        ok = write_all(out_fd, row, sizeof row);
      }
      if (!ok) _exit(4);
    }
    (void)rounds;
    edl::shutdown();
    code = 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "optimizer_bench rank %d: %s\n", rank, e.what());
    code = 2;
  }
  _exit(code);
}

// Forks the ranks (before this process starts any thread), hosts the store, collects the rows.
std::vector<ModeResult> run_processes(const BenchConfig& cfg, const std::vector<Layer>& layers,
                                      const std::vector<long>& reps, int rounds, const std::vector<Mode>& order) {
  const int n = cfg.ranks;
  std::vector<int> url_w(n), out_r(n);
  std::vector<pid_t> pids(n);
  for (int r = 0; r < n; ++r) {
    int up[2], op[2];
    if (pipe(up) != 0 || pipe(op) != 0) throw std::runtime_error("pipe failed");
    pids[r] = fork();
    if (pids[r] < 0) throw std::runtime_error("fork failed");
    if (pids[r] == 0) {
      close(up[1]);
      close(op[0]);
      child_main(cfg, r, up[0], op[1], layers, reps, rounds, order);
    }
    close(up[0]);
    close(op[1]);
    url_w[r] = up[1];
    out_r[r] = op[0];
  }
  std::vector<ModeResult> results;
  bool ok = true;
  {
    edl::StoreServer server;
    char url[256] = {0};
    std::snprintf(url, sizeof url, "%s", server.url().c_str());
    for (int r = 0; r < n; ++r) ok = ok && write_all(url_w[r], url, sizeof url);
    // Bounded: every run of a mode gets a generous deadline; a stuck rank is killed below.
    const double deadline = edl::bench::now_s() + 60 + order.size() * (cfg.warmup + cfg.steps) * 5.0;
    for (size_t k = 0; ok && k < order.size(); ++k) {
      std::vector<std::vector<double>> step_ms(n), overlap(n), comm_ms(n);
      std::vector<size_t> buckets(n);
      std::vector<long> wrong(n);
      for (int r = 0; ok && r < n; ++r) {
        uint64_t head[3];
        ok = read_all(out_r[r], head, sizeof head, deadline);
        buckets[r] = ok ? head[1] : 0;
        wrong[r] = ok ? static_cast<long>(head[2]) : 0;
        for (uint64_t i = 0; ok && i < head[0]; ++i) {
          double row[3];
          ok = read_all(out_r[r], row, sizeof row, deadline);
          step_ms[r].push_back(row[0]);
          overlap[r].push_back(row[1]);
          comm_ms[r].push_back(row[2]);
        }
      }
      if (ok) results.push_back(merge(step_ms, overlap, comm_ms, buckets, wrong));
    }
  }
  for (int r = 0; r < n; ++r) {
    if (!ok) kill(pids[r], SIGKILL);
    int status = 0;
    waitpid(pids[r], &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    close(url_w[r]);
    close(out_r[r]);
  }
  if (!ok) throw std::runtime_error("a rank process failed or timed out (see its message above)");
  return results;
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("optimizer_bench", "overlap of gradient allreduce with backward (ResNet20-like model)");
  options.add_options()("ranks", "ranks (threads, each with its own communicator)", cxxopts::value<int>()->default_value("2"))(
      "steps", "timed steps per mode and round", cxxopts::value<int>()->default_value("5"))(
      "warmup", "untimed steps per mode and round", cxxopts::value<int>()->default_value("2"))(
      "backward-ms", "single-thread compute of one backward pass", cxxopts::value<double>()->default_value("120"))(
      "bucket-kb", "bucket capacity in KiB", cxxopts::value<int>()->default_value("256"))(
      "rounds", "interleave the modes this many times", cxxopts::value<int>()->default_value("8"))(
      "fp16", "fp16 compression on the wire")(
      "processes", "ranks as forked processes in an edl::init() world (the collective engine path)")("json", "append JSON rows to PATH", cxxopts::value<std::string>()->default_value(""))(
      "h,help", "help");
  BenchConfig cfg;
  std::string json_path;
  int rounds = 8;
  try {
    auto args = options.parse(argc, argv);
    if (args.count("help")) {
      std::printf("%s\n", options.help().c_str());
      return 0;
    }
    cfg.ranks = args["ranks"].as<int>();
    cfg.steps = args["steps"].as<int>();
    cfg.warmup = args["warmup"].as<int>();
    cfg.backward_ms = args["backward-ms"].as<double>();
    cfg.bucket_bytes = static_cast<size_t>(args["bucket-kb"].as<int>()) << 10;
    cfg.fp16 = args.count("fp16") > 0;
    cfg.processes = args.count("processes") > 0;
    rounds = args["rounds"].as<int>();
    json_path = args["json"].as<std::string>();
    if (cfg.ranks < 2 || cfg.steps < 1 || cfg.warmup < 0 || cfg.backward_ms <= 0 || cfg.bucket_bytes == 0 ||
        rounds < 1)
      throw std::invalid_argument("need --ranks >= 2, --steps >= 1, --warmup >= 0, --backward-ms > 0, --bucket-kb > 0, "
                                  "--rounds >= 1");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "optimizer_bench: %s\n", e.what());
    return 2;
  }

  const auto layers = resnet20_layers();
  size_t total_params = 0, tensors = 0;
  double total_macs = 0;
  for (const auto& l : layers) {
    for (size_t c : l.counts) total_params += c;
    tensors += l.counts.size();
    total_macs += l.macs;
  }
  const double gemm_ms = calibrate_gemm_ms();
  std::vector<long> reps;
  for (const auto& l : layers)
    reps.push_back(std::max(1L, std::lround(cfg.backward_ms * l.macs / total_macs / gemm_ms)));
  std::printf("optimizer_bench: %zu parameters in %zu tensors, %d ranks, backward %.0f ms (1 thread), bucket %zu KiB%s\n",
              total_params, tensors, cfg.ranks, cfg.backward_ms, cfg.bucket_bytes >> 10, cfg.fp16 ? ", fp16" : "");

  edl::bench::JsonRows json(json_path);
  edl::bench::Table table({"mode", "step_ms", "comm_ms", "buckets", "hidden", "wrong"});
  table.header();
  const Mode modes[3] = {Mode::kComputeOnly, Mode::kNoOverlap, Mode::kOverlap};
  std::vector<double> step[3], comm[3], opt_overlap[3];
  size_t buckets = 0;
  long wrong[3] = {0, 0, 0};
  // Short runs of each mode, interleaved and in rotating order, so that load changes on the shared
  // machine hit every mode alike; the medians are over all timed steps of all rounds.
  std::vector<Mode> order;
  for (int round = 0; round < rounds; ++round)
    for (int j = 0; j < 3; ++j) order.push_back(modes[(round + j) % 3]);
  std::vector<ModeResult> results;
  if (cfg.processes) {
    results = run_processes(cfg, layers, reps, rounds, order);
  } else {
    for (size_t k = 0; k < order.size(); ++k)
      results.push_back(run_mode(cfg, order[k], layers, reps, static_cast<int>(k)));
  }
  for (size_t k = 0; k < order.size(); ++k) {
    const int m = static_cast<int>(order[k]);
    const ModeResult& r = results[k];
    step[m].insert(step[m].end(), r.steps_ms.begin(), r.steps_ms.end());
    comm[m].insert(comm[m].end(), r.comm_ms.begin(), r.comm_ms.end());
    opt_overlap[m].insert(opt_overlap[m].end(), r.overlap.begin(), r.overlap.end());
    wrong[m] += r.wrong;
    if (order[k] != Mode::kComputeOnly) buckets = r.buckets;
  }
  double med[3];
  for (int m = 0; m < 3; ++m) {
    med[m] = edl::bench::median(step[m]);
    table.row({mode_name(modes[m]), edl::bench::fmt(med[m]), edl::bench::fmt(edl::bench::median(comm[m])),
               std::to_string(modes[m] == Mode::kComputeOnly ? 0 : buckets),
               modes[m] == Mode::kOverlap ? edl::bench::fmt(edl::bench::median(opt_overlap[m])) : "-",
               std::to_string(wrong[m])});
    json.write(Json{{"ranks", cfg.ranks}, {"mode", mode_name(modes[m])}, {"step_ms", med[m]}});
  }
  // overlap_fraction: the share of the allreduce time that ran while backward was still computing
  // (median over ranks and steps).
  const double fraction = edl::bench::median(opt_overlap[2]);
  // The end-to-end view: how much of the exposed communication (no_overlap - compute_only) overlap
  // removed. Noisy when the exposed part is small next to the machine's load changes.
  const double exposed_no = med[1] - med[0], exposed_ov = med[2] - med[0];
  const double removed = exposed_no > 0 ? 1.0 - exposed_ov / exposed_no : 0.0;
  json.write(Json{{"ranks", cfg.ranks}, {"overlap_fraction", fraction}});
  std::printf("overlap / no_overlap step = %.2f (target <= 0.8); overlap_fraction = %.2f (target >= 0.6)\n"
              "exposed communication: no_overlap %.2f ms, overlap %.2f ms (%.0f%% removed); "
              "lower bound of the ratio with perfect overlap = compute_only / no_overlap = %.2f\n",
              med[2] / med[1], fraction, exposed_no, exposed_ov, removed * 100, med[0] / med[1]);
  return (wrong[0] + wrong[1] + wrong[2]) == 0 ? 0 : 1;
}
