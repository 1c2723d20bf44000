// convergence_exp: Experiment 3 of issue 7 — convergence under a changing worker count.
// ResNet20 on Fashion-MNIST (the edl-resnet20 trainer under edl-run), four runs that differ only
// in how the world size evolves and how the optimizer reacts to it:
//   a_fixed2               -np 2 for the whole run
//   b_lr_scaling           1 -> 3 -> 2 workers (--resize-at), linear LR scaling only
//   c_lr_scaling_momentum  the same resizes, LR scaling plus momentum compensation (eq. 6, T = 8)
//   d_lr_scaling_uform     the same resizes, LR scaling as PyTorch-style
//                          u-form SGD applies it: the whole momentum history at the new LR at once
//                          (eq. 5 = compensation with T = 0); target 2 is reported against b and d
// Seed, base LR, schedule, local batch, records and epochs are identical.
//
//   convergence_exp [--epochs 6] [--train-records 20000] [--test-records 5000] [--runs a,b,c,d]
//                   [--resize-at 0.5:3,2.5:2] [--window 20] [--quick] [--keep-logs DIR] [--json PATH]
//
// Elastic runs use edl-run's host discovery: a script prints "localhost:N" from a slot file that
// this bench rewrites when the trainer's per-step loss log (--loss-log) shows that the training
// progress (epochs done, from the world's trained records) crossed a resize point, so (b) and (c)
// resize at the same progress. The actual size change is read back from the loss log
// (experiments/convergence_analysis.h), and its loss spike = mean loss of the --window steps after the
// change minus the mean of the --window steps before.
//
// Rows (--json): per run and epoch {"run","epoch","test_acc","train_loss"}; per resize
// {"run","resize","from_workers","to_workers","epoch_progress","loss_before","loss_after","spike"};
// per run {"run","final_test_acc","delta_vs_fixed_pts"} (test_acc as a fraction, delta in points);
// per run and optimizer step {"run","step","epoch_progress","workers","loss"} (the normalized loss
// log, from which benchmarks_doc computes the paired differences and the spike's noise floor); first
// of all one {"config":"convergence",...} row with the recipe (epochs, records, plan, window, ...).
// Targets: (b) and (c) end within 0.3 points of (a); (c)'s spike below (b)'s at every resize.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <cxxopts.hpp>

#include "common/bench_util.h"
#include "convergence_analysis.h"
#include "testing/process.h"

#ifndef EDL_RUN_PATH
#define EDL_RUN_PATH "edl-run"
#endif
#ifndef EDL_RESNET20_PATH
#define EDL_RESNET20_PATH "edl-resnet20"
#endif

namespace {

namespace fs = std::filesystem;
namespace cv = edl::bench::convergence;
using edl::bench::fmt;
using edl::bench::Json;

volatile std::sig_atomic_t g_stop = 0;  // SIGINT / SIGTERM received: stop the run in progress
void on_signal(int) { g_stop = 1; }

struct Config {
  int epochs = 6;
  int64_t train_records = 20000, test_records = 5000;
  std::vector<std::string> runs = {"a", "b", "c", "d"};
  int start_workers = 1, fixed_workers = 2;
  std::vector<cv::ResizePoint> plan;
  int window = 20;
  double lr = 0.05;
  int base_size = 1, batch = 64;
  uint64_t seed = 1;
  double tolerance_pts = 0.3;
  int discovery_ms = 200;
  double timeout_s = 3000;
  std::string keep_logs, json;
};

struct RunSpec {
  std::string key, name;  // "a" / "a_fixed2"
  bool elastic = false, compensation = false;
  int compensation_steps = 8;  // T of eq. 6 (0: eq. 5, the buffer scaled by k at once)
};

struct RunResult {
  RunSpec spec;
  std::vector<Json> epochs;  // trainer rows reduced to {"run","epoch","test_acc","train_loss"}
  std::vector<cv::Spike> spikes;
  std::vector<cv::LossPoint> series;  // normalized per-step loss log
  double final_acc = -1;
};

class RunFailed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::string tail(const std::string& path, size_t bytes) {
  std::ifstream f(path);
  std::string s((std::istreambuf_iterator<char>(f)), {});
  return s.size() > bytes ? s.substr(s.size() - bytes) : s;
}

void write_atomically(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  std::ofstream(tmp) << text;
  fs::rename(tmp, path);
}

// Reads the complete lines appended to a file since the last call.
class LineFollower {
 public:
  explicit LineFollower(std::string path) : path_(std::move(path)) {}
  std::vector<std::string> poll() {
    std::vector<std::string> lines;
    std::ifstream f(path_, std::ios::binary);
    if (!f) return lines;
    f.seekg(static_cast<std::streamoff>(offset_));
    std::string chunk((std::istreambuf_iterator<char>(f)), {});
    size_t start = 0;
    for (size_t nl; (nl = chunk.find('\n', start)) != std::string::npos; start = nl + 1)
      lines.push_back(chunk.substr(start, nl - start));
    offset_ += start;
    return lines;
  }

 private:
  std::string path_;
  size_t offset_ = 0;
};

// edl-run in its own process group, output to a log file. stop() asks it to end (SIGTERM, which it
// forwards to its workers), then kills it and the workers listed in its pid file.
class Job {
 public:
  Job(const std::vector<std::string>& argv, const std::string& log, std::string pid_file)
      : pid_file_(std::move(pid_file)) {
    edl::testing::SpawnOptions so;
    so.log = log;
    pid_ = edl::testing::spawn(argv, so);
  }
  ~Job() { stop(); }
  // Exit status once it ended (128 + signal when killed), or -1 while it runs.
  int poll() {
    if (status_ >= 0 || pid_ <= 0) return status_;
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) == pid_) status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return status_;
  }
  void stop() {
    if (pid_ <= 0 || poll() >= 0) return;
    kill(-pid_, SIGTERM);
    for (int i = 0; i < 200 && poll() < 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (poll() < 0) {
      kill(-pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      status_ = 128 + SIGKILL;
    }
    // Workers run in their own process groups: make sure none outlives the job.
    std::ifstream pids(pid_file_);
    int slot = 0;
    pid_t worker = 0;
    std::string id;
    while (pids >> slot >> worker >> id) {
      if (worker > 0) kill(-worker, SIGKILL);
    }
  }

 private:
  pid_t pid_ = -1;
  int status_ = -1;
  std::string pid_file_;
};

std::vector<std::string> trainer_args(const Config& c, const RunSpec& r, const std::string& dir) {
  return {EDL_RESNET20_PATH, "--dataset", "fashion-mnist", "--epochs", std::to_string(c.epochs),
          "--train-records", std::to_string(c.train_records), "--test-records", std::to_string(c.test_records),
          "--batch-size", std::to_string(c.batch), "--lr", fmt(c.lr, 6), "--base-size", std::to_string(c.base_size),
          "--lr-schedule", "cosine", "--lr-scaling", "linear",
          std::string("--momentum-compensation=") + (r.compensation ? "true" : "false"),
          "--compensation-steps", std::to_string(r.compensation_steps), "--seed", std::to_string(c.seed), "--run-name", r.name,
          "--json", dir + "/epochs.jsonl", "--loss-log", dir + "/loss.jsonl"};
}

std::vector<std::string> launcher_args(const Config& c, const RunSpec& r, const std::string& dir) {
  if (!r.elastic) return {EDL_RUN_PATH, "-np", std::to_string(c.fixed_workers), "--pid-file", dir + "/pids"};
  int lo = c.start_workers, hi = c.start_workers;
  for (const auto& p : c.plan) {
    lo = std::min(lo, p.workers);
    hi = std::max(hi, p.workers);
  }
  std::string script = dir + "/hosts.sh";
  std::ofstream(script) << "#!/bin/sh\ncat '" << dir << "/slots'\n";
  fs::permissions(script, fs::perms::owner_all, fs::perm_options::add);
  return {EDL_RUN_PATH, "--min-np", std::to_string(lo), "--max-np", std::to_string(hi), "--host-discovery-script",
          script, "--discovery-interval-ms", std::to_string(c.discovery_ms), "--reset-limit", "20", "--pid-file", dir + "/pids"};
}

RunResult run_one(const Config& c, const RunSpec& r, const std::string& dir) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  RunResult res;
  res.spec = r;
  int slots = c.start_workers;
  if (r.elastic) write_atomically(dir + "/slots", "localhost:" + std::to_string(slots) + "\n");
  std::vector<std::string> argv = launcher_args(c, r, dir), train = trainer_args(c, r, dir);
  argv.insert(argv.end(), train.begin(), train.end());
  std::string log = dir + "/run.log";
  std::cout << "== " << r.name << ": " << (r.elastic ? "elastic" : "fixed") << ", logs in " << dir << std::endl;
  LineFollower follow(dir + "/loss.jsonl");
  std::vector<cv::LossPoint> series;
  auto t0 = std::chrono::steady_clock::now();
  int rc = -1;
  {
    Job job(argv, log, dir + "/pids");
    double progress = 0;
    int seen_workers = 0;
    while ((rc = job.poll()) < 0) {
      if (g_stop) throw RunFailed(r.name + ": interrupted");
      if (std::chrono::steady_clock::now() - t0 > std::chrono::duration<double>(c.timeout_s))
        throw RunFailed(r.name + ": still running after --timeout-s " + fmt(c.timeout_s, 0) + " s; log tail:\n" +
                        tail(log, 2000));
      for (const std::string& line : follow.poll()) {
        auto p = cv::parse_loss_row(line);
        if (!p) continue;
        series.push_back(*p);
        progress = std::max(progress, p->epoch_progress);
        if (p->workers != seen_workers) {
          std::cout << "   " << r.name << ": " << p->workers << " worker" << (p->workers == 1 ? "" : "s")
                    << " training at epoch progress " << fmt(p->epoch_progress, 3) << " (step " << p->step << ")"
                    << std::endl;
          seen_workers = p->workers;
        }
      }
      int due = r.elastic ? cv::workers_due(c.plan, c.start_workers, progress) : slots;
      if (due != slots) {
        std::cout << "   " << r.name << ": progress " << fmt(progress, 3) << " passed a resize point: asking for "
                  << due << " workers" << std::endl;
        write_atomically(dir + "/slots", "localhost:" + std::to_string(due) + "\n");
        slots = due;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  for (const std::string& line : follow.poll()) {
    if (auto p = cv::parse_loss_row(line)) series.push_back(*p);
  }
  if (rc != 0) throw RunFailed(r.name + ": edl-run exited with status " + std::to_string(rc) + "; log tail:\n" + tail(log, 2000));
  // An epoch redone after a rollback in which rank 0 died appears twice: the last row counts.
  std::map<int, Json> by_epoch;
  std::ifstream ef(dir + "/epochs.jsonl");
  for (std::string line; std::getline(ef, line);) {
    Json j = Json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("epoch") || !j["epoch"].is_number_integer()) continue;
    by_epoch[j["epoch"].get<int>()] = {{"run", r.name}, {"epoch", j["epoch"]}, {"test_acc", j["test_acc"]},
                                       {"train_loss", j["train_loss"]}};
  }
  for (auto& [epoch, row] : by_epoch) {
    res.epochs.push_back(row);
    if (row.value("test_acc", -1.0) >= 0) res.final_acc = row["test_acc"].get<double>();
  }
  if (static_cast<int>(res.epochs.size()) != c.epochs || res.final_acc < 0)
    throw RunFailed(r.name + ": expected " + std::to_string(c.epochs) + " epoch rows with a final test accuracy in " +
                    dir + "/epochs.jsonl, found " + std::to_string(res.epochs.size()));
  res.series = cv::normalize(series);
  res.spikes = cv::spikes(res.series, c.window);
  size_t want = r.elastic ? c.plan.size() : 0;
  if (res.spikes.size() != want) {
    std::string seen;
    for (const auto& k : res.spikes)
      seen += " " + std::to_string(k.event.from_workers) + "->" + std::to_string(k.event.to_workers) + "@" +
              fmt(k.event.epoch_progress, 2);
    throw RunFailed(r.name + ": expected " + std::to_string(want) + " resizes in the loss log, saw " +
                    std::to_string(res.spikes.size()) + (seen.empty() ? "" : " (" + seen.substr(1) + ")") +
                    ": move the resize points apart or train longer");
  }
  std::cout << "   " << r.name << ": final test accuracy " << fmt(100 * res.final_acc, 2) << "% after "
            << fmt(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0) << " s"
            << std::endl;
  return res;
}

std::string verdict(bool met) { return met ? "met" : "NOT met"; }

// The tables and the verdict lines; returns nothing (targets are reported, not enforced).
void report(const Config& c, const std::vector<RunResult>& results, edl::bench::JsonRows& json) {
  const RunResult* fixed = nullptr;
  const RunResult* b = nullptr;
  const RunResult* cc = nullptr;
  const RunResult* d = nullptr;
  for (const auto& r : results) {
    if (r.spec.key == "d") d = &r;
    if (r.spec.key == "a") fixed = &r;
    if (r.spec.key == "b") b = &r;
    if (r.spec.key == "c") cc = &r;
  }
  std::cout << "\nFinal test accuracy (" << c.test_records << " test images, " << c.epochs << " epochs)\n";
  edl::bench::Table t({"run", "final_acc_%", "delta_pts", "resizes"}, 24);
  t.header();
  for (const auto& r : results) {
    Json row{{"run", r.spec.name}, {"final_test_acc", r.final_acc}};
    std::string delta = "";
    if (fixed) {
      double d = 100 * (r.final_acc - fixed->final_acc);
      row["delta_vs_fixed_pts"] = d;
      delta = fmt(d, 2);
    }
    json.write(row);
    t.row({r.spec.name, fmt(100 * r.final_acc, 2), delta, std::to_string(r.spikes.size())});
  }
  std::cout << "\nLoss spikes (window " << c.window << " steps; spike = mean after - mean before)\n";
  edl::bench::Table s({"run", "resize", "progress", "loss_before", "loss_after", "spike"}, 22);
  s.header();
  for (const auto& r : results) {
    for (const auto& k : r.spikes)
      s.row({r.spec.name, std::to_string(k.event.from_workers) + "->" + std::to_string(k.event.to_workers),
             fmt(k.event.epoch_progress, 3), fmt(k.loss_before, 4), fmt(k.loss_after, 4), fmt(k.spike, 4)});
  }
  std::cout << "\n";
  for (const RunResult* r : {b, cc, d}) {
    if (!r || !fixed) continue;
    double d = 100 * (r->final_acc - fixed->final_acc);
    std::cout << "target 1: " << r->spec.name << " ends " << fmt(d, 2) << " points from " << fixed->spec.name
              << " (|delta| <= " << fmt(c.tolerance_pts, 2) << "): " << verdict(std::fabs(d) <= c.tolerance_pts)
              << "\n";
  }
  for (const RunResult* base : {b, d}) {
    if (!base || !cc) continue;
    for (size_t i = 0; i < std::min(base->spikes.size(), cc->spikes.size()); ++i) {
      const auto& kb = base->spikes[i];
      const auto& kc = cc->spikes[i];
      std::cout << "target 2: resize " << i + 1 << " (" << kb.event.from_workers << "->" << kb.event.to_workers
                << "): spike " << cc->spec.name << " " << fmt(kc.spike, 4) << " vs " << base->spec.name << " "
                << fmt(kb.spike, 4) << ": " << verdict(kc.spike < kb.spike) << "\n";
    }
  }
  std::cout << std::flush;
}

RunSpec spec_of(const std::string& key, const Config& c) {
  if (key == "a") return {"a", "a_fixed" + std::to_string(c.fixed_workers), false, false};
  if (key == "b") return {"b", "b_lr_scaling", true, false};
  if (key == "c") return {"c", "c_lr_scaling_momentum", true, true};
  // The u-form baseline: LR scaling in PyTorch-style SGD (buf = mu buf + g; w -= lr buf) applies the
  // new LR to the whole momentum history at once; in our v-form that is eq. 5 (T = 0).
  if (key == "d") return {"d", "d_lr_scaling_uform", true, true, 0};
  throw std::invalid_argument("--runs: unknown run '" + key +
                              "' (a = fixed, b = LR scaling, c = LR scaling + momentum, d = LR scaling, u-form SGD)");
}

Config parse(int argc, char** argv, bool* help) {
  cxxopts::Options opts("convergence_exp", "Experiment 3: convergence of ResNet20 on Fashion-MNIST under a changing worker count");
  // clang-format off
  opts.add_options()
    ("epochs", "epochs per run", cxxopts::value<int>()->default_value("6"))
    ("train-records", "training records (first N of Fashion-MNIST)", cxxopts::value<int64_t>()->default_value("20000"))
    ("test-records", "test records", cxxopts::value<int64_t>()->default_value("5000"))
    ("runs", "runs: a (fixed), b (LR scaling), c (LR scaling + momentum compensation), d (LR scaling as u-form SGD applies it: eq. 5)", cxxopts::value<std::string>()->default_value("a,b,c,d"))
    ("fixed-workers", "workers of run a", cxxopts::value<int>()->default_value("2"))
    ("start-workers", "workers at the start of runs b, c", cxxopts::value<int>()->default_value("1"))
    ("resize-at", "runs b, c: PROGRESS:WORKERS list (progress in epochs)", cxxopts::value<std::string>()->default_value("0.5:3,2.5:2"))
    ("window", "steps before / after a resize for its loss spike", cxxopts::value<int>()->default_value("20"))
    ("lr", "learning rate at --base-size workers (scaled linearly with the world size)", cxxopts::value<double>()->default_value("0.05"))
    ("base-size", "world size --lr is for", cxxopts::value<int>()->default_value("1"))
    ("batch-size", "local batch per worker", cxxopts::value<int>()->default_value("64"))
    ("seed", "seed of every run", cxxopts::value<uint64_t>()->default_value("1"))
    ("tolerance-pts", "target 1: |final accuracy - run a's| in points", cxxopts::value<double>()->default_value("0.3"))
    ("discovery-interval-ms", "edl-run host discovery period", cxxopts::value<int>()->default_value("200"))
    ("timeout-s", "limit for one run", cxxopts::value<double>()->default_value("3000"))
    ("quick", "smoke configuration (~2-3 min): 2 epochs of 4000 records, resizes at 0.4 and 1.2, window 8")
    ("keep-logs", "keep each run's logs (edl-run output, loss log, epoch rows) under DIR", cxxopts::value<std::string>()->default_value(""))
    ("json", "append JSON rows here", cxxopts::value<std::string>()->default_value(""))
    ("h,help", "help");
  // clang-format on
  auto a = opts.parse(argc, argv);
  if (!a.unmatched().empty()) throw std::invalid_argument("unexpected argument '" + a.unmatched()[0] + "'");
  if (a.count("help")) {
    std::cout << opts.help() << std::endl;
    *help = true;
    return {};
  }
  bool quick = a.count("quick") > 0;
  // --quick changes the defaults; flags given explicitly still win.
  auto pick = [&](const char* name, auto quick_value) {
    using T = decltype(quick_value);
    return quick && !a.count(name) ? quick_value : a[name].as<T>();
  };
  Config c;
  c.epochs = pick("epochs", 2);
  c.train_records = pick("train-records", int64_t{4000});
  c.test_records = pick("test-records", int64_t{1000});
  c.window = pick("window", 8);
  std::string plan = pick("resize-at", std::string("0.4:3,1.2:2"));
  c.fixed_workers = a["fixed-workers"].as<int>();
  c.start_workers = a["start-workers"].as<int>();
  c.lr = a["lr"].as<double>();
  c.base_size = a["base-size"].as<int>();
  c.batch = a["batch-size"].as<int>();
  c.seed = a["seed"].as<uint64_t>();
  c.tolerance_pts = a["tolerance-pts"].as<double>();
  c.discovery_ms = a["discovery-interval-ms"].as<int>();
  c.timeout_s = a["timeout-s"].as<double>();
  c.keep_logs = a["keep-logs"].as<std::string>();
  c.json = a["json"].as<std::string>();
  if (c.epochs < 1) throw std::invalid_argument("--epochs must be >= 1, got " + std::to_string(c.epochs));
  if (c.train_records < 1 || c.test_records < 1) throw std::invalid_argument("--train-records and --test-records must be >= 1");
  if (c.fixed_workers < 1) throw std::invalid_argument("--fixed-workers must be >= 1");
  if (c.window < 1) throw std::invalid_argument("--window must be >= 1 step, got " + std::to_string(c.window));
  if (!(c.lr > 0)) throw std::invalid_argument("--lr must be > 0");
  if (c.base_size < 1 || c.batch < 1) throw std::invalid_argument("--base-size and --batch-size must be >= 1");
  if (c.discovery_ms < 10) throw std::invalid_argument("--discovery-interval-ms must be >= 10");
  if (!(c.timeout_s > 0)) throw std::invalid_argument("--timeout-s must be > 0");
  try {
    c.plan = cv::parse_resize_plan(plan, c.start_workers);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--resize-at / --start-workers: ") + e.what());
  }
  for (const auto& p : c.plan) {
    if (p.at >= c.epochs)
      throw std::invalid_argument("--resize-at: progress " + fmt(p.at, 3) + " is not inside the " +
                                  std::to_string(c.epochs) + " epochs");
  }
  c.runs = edl::bench::split(a["runs"].as<std::string>());
  if (c.runs.empty()) throw std::invalid_argument("--runs is empty");
  for (const auto& k : c.runs) spec_of(k, c);  // validates the names
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  try {
    bool help = false;
    c = parse(argc, argv, &help);
    if (help) return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "convergence_exp: %s\n(run with --help for usage)\n", e.what());
    return 2;
  }
  for (const char* bin : {EDL_RUN_PATH, EDL_RESNET20_PATH}) {
    if (access(bin, X_OK) != 0) {
      std::fprintf(stderr, "convergence_exp: %s is missing: build edl-run and edl-resnet20 first\n", bin);
      return 2;
    }
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::string root = c.keep_logs.empty() ? (fs::temp_directory_path() / ("edl_convergence_" + std::to_string(getpid()))).string()
                                         : c.keep_logs;
  std::cout << "Experiment 3: ResNet20 on Fashion-MNIST, " << c.train_records << " training / " << c.test_records
            << " test records, " << c.epochs << " epochs, batch " << c.batch << " per worker, lr " << fmt(c.lr, 4)
            << " at " << c.base_size << " worker(s), linear LR scaling, cosine schedule, seed " << c.seed << "\n"
            << "resizes of the elastic runs (epoch progress -> workers), from " << c.start_workers << ":";
  for (const auto& p : c.plan) std::cout << " " << fmt(p.at, 2) << "->" << p.workers;
  std::cout << std::endl;
  edl::bench::JsonRows json(c.json);
  {
    std::string plan;
    for (const auto& p : c.plan) plan += (plan.empty() ? "" : ",") + fmt(p.at, 2) + ":" + std::to_string(p.workers);
    std::string runs;
    for (const auto& r : c.runs) runs += (runs.empty() ? "" : ",") + r;
    json.write({{"config", "convergence"}, {"epochs", c.epochs}, {"train_records", c.train_records},
                {"test_records", c.test_records}, {"batch", c.batch}, {"lr", c.lr}, {"base_size", c.base_size},
                {"fixed_workers", c.fixed_workers}, {"start_workers", c.start_workers}, {"resize_at", plan},
                {"window", c.window}, {"seed", c.seed}, {"tolerance_pts", c.tolerance_pts}, {"runs", runs}});
  }
  std::vector<RunResult> results;
  std::vector<std::string> failed;
  for (const std::string& key : c.runs) {
    RunSpec spec = spec_of(key, c);
    try {
      RunResult r = run_one(c, spec, root + "/" + spec.name);
      for (const Json& row : r.epochs) json.write(row);
      for (size_t i = 0; i < r.spikes.size(); ++i) {
        const auto& k = r.spikes[i];
        json.write({{"run", spec.name}, {"resize", static_cast<int>(i + 1)}, {"from_workers", k.event.from_workers},
                    {"to_workers", k.event.to_workers}, {"epoch_progress", k.event.epoch_progress},
                    {"loss_before", k.loss_before}, {"loss_after", k.loss_after}, {"spike", k.spike}});
      }
      for (const auto& p : r.series)
        json.write({{"run", spec.name}, {"step", p.step}, {"epoch_progress", p.epoch_progress},
                    {"workers", p.workers}, {"loss", p.loss}});
      results.push_back(std::move(r));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "convergence_exp: run %s FAILED: %s\n", spec.name.c_str(), e.what());
      failed.push_back(spec.name);
    }
    if (g_stop) break;
  }
  report(c, results, json);
  if (c.keep_logs.empty()) fs::remove_all(root);
  if (g_stop) {
    std::fprintf(stderr, "convergence_exp: interrupted\n");
    return 130;
  }
  if (!failed.empty()) {
    std::string names;
    for (const auto& n : failed) names += " " + n;
    std::fprintf(stderr, "convergence_exp: failed runs:%s\n", names.c_str());
    return 1;
  }
  return 0;
}
