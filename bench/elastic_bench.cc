// elastic_bench: recovery times of an elastic job on this machine (issue 3 item 9).
//
// Starts `edl-run` in elastic mode with the synthetic worker (testing/elastic_worker.cc), which logs
// every completed step with a CLOCK_MONOTONIC timestamp to a shared file, and injects events:
//   kill  — kill -9 of a random member (rank 0 included); recovery = event -> first completed step
//           of the new generation; lost_steps = the committed steps the survivors rolled back: the
//           last step a survivor committed in the old generation - the step the new generation
//           resumed from (not clamped: a negative value would mean the new generation skipped steps);
//   stop  — SIGSTOP of a random member (SIGCONT after the others recovered; it rejoins);
//   join  — one more slot in the discovery script; recovery = newcomer's process start -> its first
//           completed step (then the slot is removed again: a graceful leave).
// Then, for each N in --ranks, a job of N-1 workers grows to N and the re-rendezvous time is the
// slowest member's time from the batch boundary to the end of rendezvous + sync in the new
// generation (median over --reps joins).
// Rows (--json PATH, one object per line):
//   {"event":"kill"|"stop"|"join","ranks_before","ranks_after","recovery_ms","lost_steps"}
//   {"event":"rerendezvous","ranks","time_ms"}
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <cxxopts.hpp>

#include "common/bench_util.h"
#include "testing/process.h"

#ifndef EDL_RUN_PATH
#define EDL_RUN_PATH "edl-run"
#endif
#ifndef EDL_ELASTIC_WORKER_PATH
#define EDL_ELASTIC_WORKER_PATH "elastic_worker"
#endif

namespace {

using namespace edl::bench;

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct StepLine {
  std::string worker;
  int64_t step;
  uint64_t gen;
  int rank, size;
  double t;
};
struct GenLine {
  std::string worker;
  uint64_t gen;
  int rank, size, prev_size;
  double t, reform_ms;
  std::string role;  // GenerationInfo's role: "newcomer", "survivor", "readmitted"
};

// Tails the workers' shared log.
class Log {
 public:
  explicit Log(std::string path) : tail_(std::move(path)) {}
  void poll() {
    for (const auto& line : tail_.new_lines()) parse(line);
  }
  std::vector<StepLine> steps;
  std::vector<GenLine> gens;
  std::map<std::string, int> pid;            // worker -> latest pid
  std::vector<std::pair<std::string, double>> starts;  // worker, t
  std::vector<std::string> errors;
  std::vector<std::string> done;

 private:
  void parse(const std::string& line) {
    std::istringstream is(line);
    std::string kind;
    is >> kind;
    if (kind == "step") {
      StepLine s;
      is >> s.worker >> s.step >> s.gen >> s.rank >> s.size >> s.t;
      steps.push_back(s);
    } else if (kind == "gen") {
      GenLine g;
      int after_failure;
      is >> g.worker >> g.gen >> g.rank >> g.size >> g.prev_size >> after_failure >> g.t >> g.reform_ms >> g.role;
      gens.push_back(g);
    } else if (kind == "start") {
      std::string w;
      int p;
      double t;
      is >> w >> p >> t;
      pid[w] = p;
      starts.emplace_back(w, t);
    } else if (kind == "error") {
      errors.push_back(line);
    } else if (kind == "done") {
      done.push_back(line);
    }
  }
  LineTail tail_;
};

// edl-run processes of the running jobs: a SIGINT/SIGTERM of the bench kills them (their workers die
// with them: edl-run sets PR_SET_PDEATHSIG).
constexpr int kMaxJobs = 8;
volatile sig_atomic_t g_job_pids[kMaxJobs] = {0};

void on_signal(int sig) {
  for (int i = 0; i < kMaxJobs; ++i)
    if (g_job_pids[i] > 0) ::kill(g_job_pids[i], SIGKILL);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void track(pid_t pid, bool add) {
  for (int i = 0; i < kMaxJobs; ++i) {
    if (add && g_job_pids[i] == 0) {
      g_job_pids[i] = pid;
      return;
    }
    if (!add && g_job_pids[i] == pid) {
      g_job_pids[i] = 0;
      return;
    }
  }
}

class Job {
 public:
  Job(const std::string& edl_run, const std::string& worker, const std::string& dir, int np, int min_np, int max_np,
      double step_ms, size_t params, const std::string& tag, int restart_cooldown_s = 0)
      : log_(dir + "/" + tag + ".log"), slots_path_(dir + "/" + tag + ".slots") {
    write_slots(np);
    std::string script = dir + "/" + tag + ".sh";
    {
      std::ofstream s(script);
      s << "#!/bin/sh\ncat " << slots_path_ << "\n";
    }
    ::chmod(script.c_str(), 0755);
    std::vector<std::string> args = {edl_run, "--min-np", std::to_string(min_np), "--max-np", std::to_string(max_np),
                                     "-np", std::to_string(np), "--host-discovery-script", script,
                                     "--discovery-interval-ms", "200", "--hostname", "localhost", "--job-id", tag};
    if (restart_cooldown_s > 0) {
      // Restart killed workers only after a pause, so a kill shows the shrink (3 -> 2) before the
      // replacement joins again.
      args.push_back("--blacklist-cooldown-range");
      args.push_back(std::to_string(restart_cooldown_s) + "," + std::to_string(restart_cooldown_s));
    }
    for (std::string x : {worker, std::string("--steps"), std::string("100000000"), std::string("--step-ms"), std::to_string(step_ms),
                          std::string("--params"), std::to_string(params), std::string("--log"), dir + "/" + tag + ".log"})
      args.push_back(x);
    std::string out = dir + "/" + tag + ".edl-run.out";
    edl::testing::SpawnOptions so;
    so.log = out;
    pid_ = edl::testing::spawn(args, so);  // own process group: stop() reaches the workers too
    track(pid_, true);
  }
  ~Job() { stop(); }

  void write_slots(int n) {
    std::string tmp = slots_path_ + ".tmp";
    {
      std::ofstream s(tmp);
      s << "localhost:" << n << "\n";
    }
    std::rename(tmp.c_str(), slots_path_.c_str());
  }

  void stop() {
    if (pid_ <= 0) return;
    track(pid_, false);
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 300; ++i) {  // 15 s for a graceful stop
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (pid_ > 0) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
    for (auto& [w, p] : log_.pid) {
      ::kill(p, SIGCONT);
      ::kill(p, SIGKILL);  // stragglers (stopped ones) of this job only
    }
  }

  bool alive() { return pid_ > 0 && ::waitpid(pid_, nullptr, WNOHANG) == 0; }

  // Polls the log until pred() or the timeout; throws on timeout or when edl-run exited.
  void wait(const std::string& what, double timeout_ms, const std::function<bool()>& pred) {
    double end = now_ms() + timeout_ms;
    for (;;) {
      log_.poll();
      if (pred()) return;
      if (now_ms() > end) throw std::runtime_error("timed out waiting for " + what);
      if (!alive()) throw std::runtime_error("edl-run exited while waiting for " + what);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  // Waits until the newest generation has `size` members and completed >= k steps.
  uint64_t wait_stable(int size, int k, double timeout_ms) {
    uint64_t gen = 0;
    wait("a generation of " + std::to_string(size) + " training", timeout_ms, [&] {
      if (log_.steps.empty()) return false;
      const auto& last = log_.steps.back();
      if (last.size != size) return false;
      for (const auto& g : log_.gens)  // the newest generation must be the one training
        if (g.gen > last.gen) return false;
      int n = 0;
      for (auto it = log_.steps.rbegin(); it != log_.steps.rend() && it->gen == last.gen; ++it) n += it->rank == 0;
      gen = last.gen;
      return n >= k;
    });
    return gen;
  }

  Log& log() { return log_; }

 private:
  Log log_;
  std::string slots_path_;
  pid_t pid_ = -1;
};

// The committed steps the survivors rolled back: the highest step any worker other than `excluded`
// committed in generation `old_gen` minus the step the new generation resumed from (its first
// completed step - 1). Not clamped at 0.
int64_t rolled_back(const Log& log, uint64_t old_gen, const std::string& excluded, const StepLine& first) {
  int64_t last = 0;
  for (const auto& s : log.steps)
    if (s.gen == old_gen && s.worker != excluded) last = std::max(last, s.step);
  return last - (first.step - 1);
}

struct EventRow {
  std::string event;
  int before = 0, after = 0;
  double recovery_ms = 0;
  int64_t lost = 0;
};

// kill / stop: signal a random member of the current generation, wait for the next generation's
// first completed step.
EventRow fault_event(Job& job, const std::string& kind, int workers, std::mt19937& rng) {
  uint64_t g0 = job.wait_stable(workers, 5, 60000);
  std::vector<std::string> members;
  for (const auto& s : job.log().steps)
    if (s.gen == g0 && std::find(members.begin(), members.end(), s.worker) == members.end()) members.push_back(s.worker);
  std::string victim = members[rng() % members.size()];
  int pid = job.log().pid.at(victim);
  double t0 = now_ms();
  ::kill(pid, kind == "kill" ? SIGKILL : SIGSTOP);
  StepLine first{};
  job.wait("recovery after " + kind + " of " + victim, 30000, [&] {
    for (const auto& s : job.log().steps)
      if (s.gen > g0 && s.t > t0) {
        first = s;
        return true;
      }
    return false;
  });
  if (kind == "stop") ::kill(pid, SIGCONT);  // it finds itself evicted and rejoins
  EventRow r;
  r.event = kind;
  r.before = workers;
  r.after = first.size;
  r.recovery_ms = first.t - t0;
  r.lost = rolled_back(job.log(), g0, victim, first);
  return r;
}

EventRow join_event(Job& job, int workers) {
  job.wait_stable(workers, 5, 60000);
  size_t starts_before = job.log().starts.size();
  int64_t before_step = job.log().steps.empty() ? 0 : job.log().steps.back().step;
  job.write_slots(workers + 1);
  std::string newcomer;
  double t_start = 0;
  job.wait("a newcomer to start", 20000, [&] {
    if (job.log().starts.size() <= starts_before) return false;
    newcomer = job.log().starts[starts_before].first;
    t_start = job.log().starts[starts_before].second;
    return true;
  });
  StepLine first{};
  job.wait("the newcomer's first step", 30000, [&] {
    for (const auto& s : job.log().steps)
      if (s.worker == newcomer && s.t > t_start) {
        first = s;
        return true;
      }
    return false;
  });
  uint64_t old_gen = 0;  // the generation the old members left for the newcomer's
  for (const auto& s : job.log().steps)
    if (s.gen < first.gen) old_gen = std::max(old_gen, s.gen);
  (void)before_step;
  EventRow r;
  r.event = "join";
  r.before = workers;
  r.after = first.size;
  r.recovery_ms = first.t - t_start;
  r.lost = rolled_back(job.log(), old_gen, newcomer, first);
  job.write_slots(workers);  // scale back down: edl-run sends SIGTERM, a graceful leave
  job.wait_stable(workers, 3, 60000);
  return r;
}

// Grows a job of n-1 workers to n; returns the slowest member's rendezvous + sync time.
double rerendezvous(Job& job, int n) {
  job.wait_stable(n - 1, 3, 120000);
  size_t gens_before = job.log().gens.size();
  uint64_t g0 = job.log().steps.back().gen;
  job.write_slots(n);
  uint64_t g1 = 0;
  job.wait("generation of " + std::to_string(n), 120000, [&] {
    std::map<uint64_t, int> count;
    for (size_t i = gens_before; i < job.log().gens.size(); ++i) {
      const auto& g = job.log().gens[i];
      if (g.gen > g0 && g.size == n && ++count[g.gen] == n) {
        g1 = g.gen;
        return true;
      }
    }
    return false;
  });
  double worst = 0;
  for (size_t i = gens_before; i < job.log().gens.size(); ++i) {
    const auto& g = job.log().gens[i];
    if (g.gen == g1 && g.role == "survivor") worst = std::max(worst, g.reform_ms);  // not the joiner
  }
  job.write_slots(n - 1);
  return worst;
}

std::string temp_dir() {
  char tmpl[] = "/tmp/edl_elastic_bench_XXXXXX";
  if (!::mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
  return tmpl;
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options opts("elastic_bench", "Recovery times of an elastic EDL job (kill, stop, join, re-rendezvous)");
  opts.add_options()
    ("edl-run", "path of edl-run", cxxopts::value<std::string>()->default_value(EDL_RUN_PATH))
    ("worker", "path of the synthetic worker", cxxopts::value<std::string>()->default_value(EDL_ELASTIC_WORKER_PATH))
    ("workers", "workers of the kill/stop/join job", cxxopts::value<int>()->default_value("3"))
    ("kills", "kill -9 events", cxxopts::value<int>()->default_value("5"))
    ("stops", "SIGSTOP events", cxxopts::value<int>()->default_value("2"))
    ("joins", "join events", cxxopts::value<int>()->default_value("3"))
    ("ranks", "re-rendezvous sizes", cxxopts::value<std::string>()->default_value("2,4,8,16"))
    ("reps", "joins per re-rendezvous size", cxxopts::value<int>()->default_value("3"))
    ("step-ms", "compute time of one step", cxxopts::value<double>()->default_value("20"))
    ("params", "model size (floats)", cxxopts::value<size_t>()->default_value("65536"))
    ("restart-cooldown-s", "edl-run restarts a killed worker after this pause", cxxopts::value<int>()->default_value("2"))
    ("seed", "random seed", cxxopts::value<unsigned>()->default_value("7"))
    ("json", "write JSON rows to PATH", cxxopts::value<std::string>()->default_value(""))
    ("h,help", "help");
  auto a = edl::bench::parse_flags(opts, argc, argv);
  if (a.count("help")) {
    std::printf("%s\n", opts.help().c_str());
    return 0;
  }
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGINT, on_signal);
  ::signal(SIGTERM, on_signal);
  JsonRows json(a["json"].as<std::string>());
  std::mt19937 rng(a["seed"].as<unsigned>());
  std::string dir = temp_dir();
  std::string edl_run = a["edl-run"].as<std::string>(), worker = a["worker"].as<std::string>();
  int W = a["workers"].as<int>();
  double step_ms = a["step-ms"].as<double>();
  size_t params = a["params"].as<size_t>();
  std::printf("elastic_bench: logs in %s\n", dir.c_str());
  int rc = 0;
  std::map<std::string, std::vector<double>> rec;
  try {
    Table t({"event", "ranks_before", "ranks_after", "recovery_ms", "lost_steps"});
    t.header();
    Job job(edl_run, worker, dir, W, 2, W + 1, step_ms, params, "faults", a["restart-cooldown-s"].as<int>());
    auto emit = [&](const EventRow& r) {
      t.row({r.event, std::to_string(r.before), std::to_string(r.after), fmt(r.recovery_ms, 1), std::to_string(r.lost)});
      json.write(Json{{"event", r.event}, {"ranks_before", r.before}, {"ranks_after", r.after},
                      {"recovery_ms", r.recovery_ms}, {"lost_steps", r.lost}});
      rec[r.event].push_back(r.recovery_ms);
    };
    for (int i = 0; i < a["kills"].as<int>(); ++i) emit(fault_event(job, "kill", W, rng));
    for (int i = 0; i < a["stops"].as<int>(); ++i) emit(fault_event(job, "stop", W, rng));
    for (int i = 0; i < a["joins"].as<int>(); ++i) emit(join_event(job, W));
    for (const auto& e : job.log().errors) std::printf("worker error: %s\n", e.c_str());
    job.stop();
    for (auto& [k, v] : rec) std::printf("%s: recovery p50 %.1f ms, max %.1f ms over %zu events\n", k.c_str(), median(v), *std::max_element(v.begin(), v.end()), v.size());

    Table t2({"event", "ranks", "time_ms"});
    t2.header();
    std::stringstream ss(a["ranks"].as<std::string>());
    std::string item;
    while (std::getline(ss, item, ',')) {
      int n = std::stoi(item);
      if (n < 2) continue;
      Job j(edl_run, worker, dir, n - 1, 1, n, std::max(step_ms, 30.0), 4096, "rdzv" + std::to_string(n));
      std::vector<double> v;
      for (int r = 0; r < a["reps"].as<int>(); ++r) v.push_back(rerendezvous(j, n));
      double m = median(v);
      t2.row({"rerendezvous", std::to_string(n), fmt(m, 1)});
      json.write(Json{{"event", "rerendezvous"}, {"ranks", n}, {"time_ms", m}});
      j.stop();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "elastic_bench: %s (logs in %s)\n", e.what(), dir.c_str());
    rc = 1;
  }
  return rc;
}
