// scaling_bench: data-parallel training throughput of the reference models under edl-run at 1, 2 and
// 4 workers (1 thread each), over loopback and over emulated cluster links (testing/netns.h), with
// the distributed optimizer's overlapped, fused gradient allreduce (issue 7 item 1).
//
//   scaling_bench [--models resnet20,mobilenetv2] [--workers 1,2,4] [--links loopback,10gbit+0.1ms,1gbit+0.1ms]
//                 [--batch 64] [--steps 20] [--warmup 3] [--repeats 1] [--json PATH]
//
// Rows: {"model","workers","link","images_per_s","speedup","comm_share"} plus "step_ms",
// "oversubscribed" (more workers than cores) and "effective_link" (what tc could emulate).
// speedup = images/s / images/s of 1 worker; comm_share = share of the step that step() spent
// waiting for gradient buckets (communication not hidden behind backward), rank 0's median.
// A single worker does no communication, so its loopback run is reported for every link.
// Emulated links need root; without it they are skipped with a message.
// The pseudo-link "independent" is the machine's ceiling: k single-worker processes started side by
// side with no launcher (each a world of one: no communication at all); images/s is their sum.
// Whatever k such processes lose against k x one process alone (shared caches, memory bandwidth,
// a hypervisor's vCPUs) no data-parallel run of k workers can win back, so a k-worker row is read
// against the "independent" row of the same k ("efficiency" in the human table).
//
// The same executable is the worker: `scaling_bench --worker ...` (started by edl-run).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <thread>

#include <cxxopts.hpp>

#include <edl/edl.h>
#include <edl/error.h>
#include <edl/optim.h>

#include "common/bench_util.h"
#include "models/mobilenetv2/mobilenetv2.h"
#include "models/resnet20/resnet20.h"
#include "testing/netns.h"
#include "testing/process.h"

#ifndef EDL_RUN_PATH
#define EDL_RUN_PATH "edl-run"
#endif

namespace {

using edl::bench::Json;
using edl::bench::fmt;

using edl::bench::split;

// --- worker ----------------------------------------------------------------------------------

std::unique_ptr<edl::models::Model> make_model(const std::string& name) {
  edl::models::ModelConfig c;
  c.threads = 1;
  if (name == "resnet20") return std::make_unique<edl::models::ResNet20>(c);
  if (name == "mobilenetv2") return std::make_unique<edl::models::MobileNetV2>(c);
  throw std::invalid_argument("unknown model '" + name + "' (resnet20, mobilenetv2)");
}

// With emulated links the worker moves itself into the first free namespace of --netns (claimed by
// creating <slot-dir>/<i> exclusively) and tells EDL to publish that namespace's address to peers.
void enter_claimed_namespace(const std::string& list, const std::string& slot_dir) {
  std::vector<std::string> names = split(list);
  for (size_t i = 0; i < names.size(); ++i) {
    std::string slot = slot_dir + "/" + std::to_string(i);
    int fd = open(slot.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) continue;
    close(fd);
    edl::testing::NetnsCluster::enter(names[i]);
    std::string addr = "10.77.0." + std::to_string(i + 1);
    setenv("EDL_BIND_ADDR", addr.c_str(), 1);  // read by edl::init() (Config::from_env)
    return;
  }
  throw std::runtime_error("no free namespace slot in " + slot_dir);
}

int run_worker(const cxxopts::ParseResult& a) {
  if (!a["netns"].as<std::string>().empty()) enter_claimed_namespace(a["netns"].as<std::string>(), a["slot-dir"].as<std::string>());
  edl::init();
  const int batch = a["batch"].as<int>(), steps = a["steps"].as<int>(), warmup = a["warmup"].as<int>();
  auto model = make_model(a["model"].as<std::string>());
  edl::DistributedOptimizerOptions o;
  o.scaling.base_lr = 0.01;
  edl::DistributedOptimizer opt(o);
  for (const auto& p : model->parameters()) opt.add_parameter(p.name, p.data, p.grad, p.count);
  const auto& mc = model->config();
  std::mt19937 rng(1234 + edl::rank());
  std::uniform_real_distribution<float> pixel(-1.0f, 1.0f);
  std::vector<float> images(static_cast<size_t>(batch) * mc.channels * mc.height * mc.width);
  std::vector<int32_t> labels(batch);
  for (float& v : images) v = pixel(rng);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % mc.classes);
  // Independent copies start their steps together (a wall-clock instant chosen by the driver), so
  // that every timed step of one copy runs next to the other copies' steps.
  if (const double start = a["start-at"].as<double>(); start > 0) {
    const double wait = start - std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
  }
  std::vector<double> step_s, wait_s;
  bool finite = true;
  for (int i = 0; i < warmup + steps; ++i) {
    double t0 = edl::bench::now_s();
    auto loss = model->forward(images.data(), labels.data(), batch, true);
    model->backward([&](size_t k) { opt.grad_ready(k); });
    opt.step();
    double t1 = edl::bench::now_s();
    finite = finite && std::isfinite(loss.loss);
    if (i >= warmup) {
      step_s.push_back(t1 - t0);
      wait_s.push_back(opt.last_step_stats().wait_s);
    }
  }
  if (edl::rank() == 0) {
    double step = edl::bench::median(step_s);
    Json r{{"size", edl::size()}, {"step_s", step}, {"wait_s", edl::bench::median(wait_s)},
           {"images_per_s", edl::size() * batch / step}, {"finite", finite}};
    std::ofstream(a["out"].as<std::string>()) << r.dump() << "\n";
  }
  edl::shutdown();
  return finite ? 0 : 3;
}

// --- driver ----------------------------------------------------------------------------------

// Runs argv in its own process group with output to `log`; kills the group after `timeout_s`.
int run_bounded(const std::vector<std::string>& argv, const std::string& log, double timeout_s) {
  edl::testing::SpawnOptions so;
  so.log = log;
  edl::testing::Process p(argv, so);
  const int status = p.wait(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  if (status >= 0) return status;
  p.stop(std::chrono::seconds(2));
  return 124;
}

std::string tail(const std::string& path, size_t bytes) {
  std::ifstream f(path);
  std::string s((std::istreambuf_iterator<char>(f)), {});
  return s.size() > bytes ? s.substr(s.size() - bytes) : s;
}

struct Measurement {
  double images_per_s = 0, step_s = 0, wait_s = 0;
  std::string effective_link;
};

// This executable as a worker writing its result to `out`.
std::vector<std::string> worker_argv(const cxxopts::ParseResult& a, const std::string& model, const std::string& out) {
  std::filesystem::remove(out);
  return {std::filesystem::read_symlink("/proc/self/exe"), "--worker", "--model", model, "--batch",
          std::to_string(a["batch"].as<int>()), "--steps", std::to_string(a["steps"].as<int>()), "--warmup",
          std::to_string(a["warmup"].as<int>()), "--out", out};
}

// A worker's result file, checked; `what` names the run in errors.
Json read_result(int rc, const std::string& out, const std::string& log, const std::string& what) {
  if (rc != 0 || !std::filesystem::exists(out))
    throw std::runtime_error(what + " failed (status " + std::to_string(rc) + "); log tail:\n" + tail(log, 2000));
  Json r = Json::parse(std::ifstream(out));
  if (!r.at("finite").get<bool>()) throw std::runtime_error(what + ": training loss became non-finite");
  return r;
}

Measurement measure(const cxxopts::ParseResult& a, const std::string& model, int workers,
                    const edl::testing::LinkSpec& link, const std::string& dir) {
  std::string out = dir + "/result.json", log = dir + "/run.log";
  std::vector<std::string> worker = worker_argv(a, model, out);
  std::vector<std::string> argv;
  std::unique_ptr<edl::testing::NetnsCluster> cluster;
  Measurement m;
  m.effective_link = link.name;
  if (link.name == "loopback") {
    argv = {EDL_RUN_PATH, "-np", std::to_string(workers)};
  } else {
    cluster = std::make_unique<edl::testing::NetnsCluster>(workers, link);
    m.effective_link = cluster->effective_label();
    std::string slots = dir + "/slots";
    std::filesystem::remove_all(slots);
    std::filesystem::create_directories(slots);
    std::string names;
    for (int i = 0; i < workers; ++i) names += (i ? "," : "") + cluster->ns(i);
    argv = {"ip", "netns", "exec", cluster->switch_ns(), EDL_RUN_PATH, "-np", std::to_string(workers),
            "--store-bind", edl::testing::NetnsCluster::switch_address()};
    worker.insert(worker.end(), {"--netns", names, "--slot-dir", slots});
  }
  argv.insert(argv.end(), worker.begin(), worker.end());
  int rc = run_bounded(argv, log, a["timeout-s"].as<double>());
  Json r = read_result(rc, out, log, model + " x" + std::to_string(workers) + " over " + link.name);
  m.images_per_s = r.at("images_per_s").get<double>();
  m.step_s = r.at("step_s").get<double>();
  m.wait_s = r.at("wait_s").get<double>();
  return m;
}

// The ceiling: k copies of one worker at once, no launcher (each is a world of one).
Measurement measure_independent(const cxxopts::ParseResult& a, const std::string& model, int k, const std::string& dir) {
  std::vector<int> rc(k, -1);
  std::vector<std::thread> runs;
  // Model set-up takes well under a second per copy; all copies start stepping 3 s from now.
  const double start_at = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() + 3.0;
  auto path = [&](int i, const char* ext) { return dir + "/independent." + std::to_string(i) + ext; };
  for (int i = 0; i < k; ++i) {
    std::vector<std::string> argv = worker_argv(a, model, path(i, ".json"));
    argv.insert(argv.end(), {"--start-at", fmt(start_at, 3)});
    runs.emplace_back([&, argv, i] { rc[i] = run_bounded(argv, path(i, ".log"), a["timeout-s"].as<double>()); });
  }
  for (auto& t : runs) t.join();
  Measurement m;
  m.effective_link = "independent";
  for (int i = 0; i < k; ++i) {
    Json r = read_result(rc[i], path(i, ".json"), path(i, ".log"),
                         model + " independent copy " + std::to_string(i) + " of " + std::to_string(k));
    m.images_per_s += r.at("images_per_s").get<double>();
    m.step_s += r.at("step_s").get<double>() / k;
  }
  return m;
}

int run_driver(const cxxopts::ParseResult& a) {
  std::vector<std::string> links = split(a["links"].as<std::string>());
  std::vector<int> counts;
  for (const auto& w : split(a["workers"].as<std::string>())) counts.push_back(std::stoi(w));
  std::string why;
  bool need_netns = std::any_of(links.begin(), links.end(),
                                [](const std::string& l) { return l != "loopback" && l != "independent"; });
  for (const std::string& ln : links)
    if (ln != "independent") (void)edl::testing::parse_link(ln);  // a bad --links entry fails before any run
  if (need_netns) {
    why = edl::testing::NetnsCluster::unsupported_reason();
    if (!why.empty()) std::cout << "note: emulated links skipped: " << why << "\n";
    edl::testing::NetnsCluster::remove_stale();
  }
  unsigned cores = std::thread::hardware_concurrency();
  std::string dir = std::filesystem::temp_directory_path() / ("edl_scaling_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  edl::bench::JsonRows json(a["json"].as<std::string>());
  edl::bench::Table t({"model", "workers", "link", "images/s", "speedup", "efficiency", "comm_share", "step_ms", "note"}, 13);
  t.header();
  int failures = 0;
  const int repeats = std::max(1, a["repeats"].as<int>());
  for (const std::string& model : split(a["models"].as<std::string>())) {
    Measurement base = measure(a, model, 1, edl::testing::LinkSpec{}, dir);
    std::map<int, double> ceiling;  // k -> speed-up of k independent copies
    for (const std::string& ln : links) {
      const bool independent = ln == "independent";
      edl::testing::LinkSpec link = independent ? edl::testing::LinkSpec{"independent"} : edl::testing::parse_link(ln);
      if (link.name != "loopback" && !why.empty()) continue;
      for (int k : counts) {
        Measurement m;
        double speedup = 1.0;
        try {
          if (k == 1) {
            m = base;
          } else {
            // --repeats R > 1: R interleaved (1-worker, k-worker) pairs; the speed-up is the median of
            // the pairs' ratios, so slow drifts of a shared machine's load cancel out.
            std::vector<double> ratio, ips, step, wait;
            for (int r = 0; r < repeats; ++r) {
              Measurement b = r == 0 ? base : measure(a, model, 1, edl::testing::LinkSpec{}, dir);
              m = independent ? measure_independent(a, model, k, dir) : measure(a, model, k, link, dir);
              ratio.push_back(m.images_per_s / b.images_per_s);
              ips.push_back(m.images_per_s);
              step.push_back(m.step_s);
              wait.push_back(m.wait_s);
            }
            speedup = edl::bench::median(ratio);
            m.images_per_s = edl::bench::median(ips);
            m.step_s = edl::bench::median(step);
            m.wait_s = edl::bench::median(wait);
          }
        } catch (const std::exception& e) {
          std::cerr << "scaling_bench: " << e.what() << "\n";
          ++failures;
          continue;
        }
        std::string eff = k == 1 ? "loopback" : m.effective_link;  // 1 worker: the loopback run, reused
        bool over = static_cast<unsigned>(k) > cores;
        double share = m.step_s > 0 ? m.wait_s / m.step_s : 0;
        std::string note = over ? "oversubscribed" : "";
        if (eff != link.name) note += (note.empty() ? "" : ",") + std::string("as ") + eff;
        if (independent) ceiling[k] = speedup;
        const bool has_ceiling = ceiling.count(k) && ceiling[k] > 0;
        t.row({model, std::to_string(k), link.name, fmt(m.images_per_s, 1), fmt(speedup, 3),
               has_ceiling ? fmt(speedup / ceiling[k], 3) : "-", fmt(share, 3), fmt(1000 * m.step_s, 1), note});
        json.write({{"model", model}, {"workers", k}, {"link", link.name}, {"images_per_s", m.images_per_s},
                    {"speedup", speedup}, {"comm_share", share}, {"step_ms", 1000 * m.step_s},
                    {"oversubscribed", over}, {"effective_link", eff}, {"cores", cores},
                    {"efficiency", has_ceiling ? Json(speedup / ceiling[k]) : Json(nullptr)}});
      }
    }
  }
  std::filesystem::remove_all(dir);
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options opts("scaling_bench", "Data-parallel training throughput at 1/2/4 workers, loopback and emulated links");
  opts.add_options()
    ("models", "models", cxxopts::value<std::string>()->default_value("resnet20,mobilenetv2"))
    ("workers", "worker counts", cxxopts::value<std::string>()->default_value("1,2,4"))
    ("links", "independent (the ceiling: k copies, no communication), loopback and/or emulated links "
     "(<N>gbit[+<D>ms], root only)",
     cxxopts::value<std::string>()->default_value("independent,loopback,10gbit+0.1ms,1gbit+0.1ms"))
    ("batch", "images per worker per step", cxxopts::value<int>()->default_value("64"))
    ("steps", "timed steps", cxxopts::value<int>()->default_value("20"))
    ("warmup", "untimed steps first", cxxopts::value<int>()->default_value("3"))
    ("repeats", "interleaved (1-worker, k-worker) run pairs per row; speed-up = median ratio",
     cxxopts::value<int>()->default_value("1"))
    ("timeout-s", "limit for one run", cxxopts::value<double>()->default_value("600"))
    ("json", "append JSON rows here", cxxopts::value<std::string>()->default_value(""))
    ("worker", "internal: run as a worker under edl-run")
    ("model", "internal (worker): model", cxxopts::value<std::string>()->default_value("resnet20"))
    ("out", "internal (worker): result file", cxxopts::value<std::string>()->default_value(""))
    ("netns", "internal (worker): namespaces to claim", cxxopts::value<std::string>()->default_value(""))
    ("slot-dir", "internal (worker): claim directory", cxxopts::value<std::string>()->default_value(""))
    ("start-at", "internal (worker): start stepping at this Unix time (s)", cxxopts::value<double>()->default_value("0"))
    ("h,help", "help");
  try {
    auto a = edl::bench::parse_flags(opts, argc, argv);
    if (a.count("help")) {
      std::cout << opts.help() << std::endl;
      return 0;
    }
    return a.count("worker") ? run_worker(a) : run_driver(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "scaling_bench: %s\n", e.what());
    return 2;
  }
}
