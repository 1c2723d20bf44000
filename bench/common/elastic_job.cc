#include "common/elastic_job.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "testing/process.h"

namespace edl::bench {
namespace {

// edl-run processes of the running jobs, for the signal handler.
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

}  // namespace

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void install_job_cleanup() {
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGINT, on_signal);
  ::signal(SIGTERM, on_signal);
}

void WorkerLog::poll() {
  for (const auto& line : tail_.new_lines()) parse(line);
}

void WorkerLog::parse(const std::string& line) {
  std::istringstream is(line);
  std::string kind;
  is >> kind;
  if (parse_own(kind, line)) return;
  if (kind == "step") {
    StepLine s;
    is >> s.worker >> s.step >> s.gen >> s.rank >> s.size >> s.t;
    if (is) {
      steps.push_back(s);
      max_step = std::max(max_step, s.step);
    }
  } else if (kind == "gen") {
    GenLine g;
    int after_failure = 0;
    is >> g.worker >> g.gen >> g.rank >> g.size >> g.prev_size >> after_failure >> g.t >> g.reform_ms >> g.role;
    gens.push_back(g);
  } else if (kind == "start") {
    std::string w;
    long p = 0;
    double t = 0;
    is >> w >> p >> t;
    pid[w] = static_cast<pid_t>(p);
    starts.emplace_back(w, t);
  } else if (kind == "error") {
    errors.push_back(line);
  } else if (kind == "done") {
    done.push_back(line);
  }
}

ElasticJob::ElasticJob(const ElasticJobOptions& o)
    : slots_path_(o.dir + "/" + o.tag + ".slots"), out_(o.dir + "/" + o.tag + ".edl-run.out"),
      log_(o.dir + "/" + o.tag + ".log") {
  std::vector<std::string> args = {o.edl_run, "--min-np", std::to_string(o.min_np), "--max-np", std::to_string(o.max_np),
                                   "-np", std::to_string(o.np), "--hostname", "localhost", "--job-id", o.tag};
  if (o.discovery) {
    write_slots(o.np);
    std::string script = o.dir + "/" + o.tag + ".sh";
    {
      std::ofstream s(script);
      s << "#!/bin/sh\ncat " << slots_path_ << "\n";
    }
    ::chmod(script.c_str(), 0755);
    for (std::string x : {std::string("--host-discovery-script"), script, std::string("--discovery-interval-ms"), std::string("200")})
      args.push_back(x);
  }
  if (o.restart_cooldown_s > 0) {
    args.push_back("--blacklist-cooldown-range");
    args.push_back(std::to_string(o.restart_cooldown_s) + "," + std::to_string(o.restart_cooldown_s));
  }
  if (!o.store_url.empty()) {
    args.push_back("--store");
    args.push_back(o.store_url);
  }
  if (!o.secret.empty()) {
    args.push_back("--secret");
    args.push_back(o.secret);
  }
  for (std::string x : {o.worker, std::string("--steps"), std::string("100000000"), std::string("--step-ms"),
                        std::to_string(o.step_ms), std::string("--params"), std::to_string(o.params), std::string("--log"),
                        o.dir + "/" + o.tag + ".log"})
    args.push_back(x);
  edl::testing::SpawnOptions so;
  so.log = out_;
  so.env = o.env;
  pid_ = edl::testing::spawn(args, so);  // own process group: stop() reaches the workers too
  track(pid_, true);
}

void ElasticJob::write_slots(int n) {
  std::string tmp = slots_path_ + ".tmp";
  {
    std::ofstream s(tmp);
    s << "localhost:" << n << "\n";
  }
  std::rename(tmp.c_str(), slots_path_.c_str());
}

void ElasticJob::stop() {
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

bool ElasticJob::alive() { return pid_ > 0 && ::waitpid(pid_, nullptr, WNOHANG) == 0; }

void ElasticJob::wait(const std::string& what, double timeout_ms, const std::function<bool()>& pred) {
  double end = now_ms() + timeout_ms;
  for (;;) {
    log_.poll();
    if (pred()) return;
    if (now_ms() > end) throw std::runtime_error("timed out waiting for " + what);
    if (!alive()) throw std::runtime_error("edl-run exited while waiting for " + what);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

uint64_t ElasticJob::wait_stable(int size, int k, double timeout_ms) {
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

}  // namespace edl::bench
