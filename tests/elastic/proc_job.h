// ProcJob: an elastic job of real processes for tests — the synthetic worker
// (testing/elastic_worker.cc) spawned through edl::init in elastic mode against an in-test
// StoreServer, and the parsed lines of the workers' shared log (steps, generations, done, audit,
// catch-up, errors). Every child is killed and reaped when the ProcJob goes away.
// Thread-safety: one test thread.
#pragma once

#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "edl/elastic.h"
#include "edl/store.h"
#include "edl/store_server.h"
#include "testing/process.h"

extern char** environ;

namespace edl::elastic::proc_test {

using namespace std::chrono_literals;

inline int64_t process_reference_hist(int64_t steps) {
  uint64_t h = 0;
  for (int64_t s = 1; s <= steps; ++s) h = h * 1000003u + static_cast<uint64_t>(s);
  return static_cast<int64_t>(h);
}

struct Step {
  std::string worker;
  int64_t step;
  uint64_t gen;
  int rank, size;
};
struct Done {
  int64_t step;
  std::string crc, hist;
};
struct CatchUpLine {
  std::string worker;
  int on = 0;  // 1: started receiving the state, 0: caught up
  int64_t step = 0;
  double t = 0;  // CLOCK_MONOTONIC ms
};

class ProcJob {
 public:
  explicit ProcJob(std::string job, int steps = 60) : job_(std::move(job)), steps_(steps) {
    edl::StoreServerOptions so;
    so.secret = "process-test-secret";
    server_ = std::make_unique<edl::StoreServer>(so);
    char tmpl[] = "/tmp/edl_elastic_proc_XXXXXX";
    int fd = mkstemp(tmpl);
    REQUIRE(fd >= 0);
    ::close(fd);
    log_ = tmpl;
  }
  ~ProcJob() { ::unlink(log_.c_str()); }  // the workers' Process objects SIGKILL and reap them

  void spawn(const std::string& id, int min_np, int max_np, const std::string& secret = "process-test-secret",
             const std::map<std::string, std::string>& extra_env = {}, const std::vector<std::string>& extra_args = {}) {
    std::map<std::string, std::string> env;
    for (char** e = environ; *e; ++e) {
      std::string kv(*e);
      auto eq = kv.find('=');
      if (eq != std::string::npos && kv.compare(0, 4, "EDL_") != 0) env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    env["EDL_STORE"] = server_->url();
    env["EDL_JOB_SECRET"] = secret;
    env["EDL_JOB_ID"] = job_;
    env["EDL_ELASTIC"] = "1";
    env["EDL_MIN_NP"] = std::to_string(min_np);
    env["EDL_MAX_NP"] = std::to_string(max_np);
    env["EDL_WORKER_ID"] = id;
    env["EDL_HEARTBEAT_MS"] = "100";
    env["EDL_LEASE_MS"] = "700";
    env["EDL_TIMEOUT_MS"] = "10000";
    env["EDL_CONNECT_TIMEOUT_MS"] = "5000";
    env["EDL_START_WINDOW_MS"] = "300";
    env["EDL_RENDEZVOUS_GRACE_MS"] = "1000";
    env["EDL_RENDEZVOUS_TIMEOUT_MS"] = "10000";
    env["EDL_LOG_LEVEL"] = "0";
    for (const auto& [k, v] : extra_env) env[k] = v;
    std::vector<std::string> strs;
    for (auto& [k, v] : env) strs.push_back(k + "=" + v);
    std::vector<std::string> args = {EDL_TEST_ELASTIC_WORKER, "--steps", std::to_string(steps_), "--step-ms", "10",
                                     "--params", "4096", "--log", log_};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    edl::testing::SpawnOptions o;
    o.env = strs;
    o.inherit_env = false;
    o.stderr_path = "/dev/null";
    o.own_group = false;  // signal() reaches the worker alone, as kill(1) would
    procs_[id] = edl::testing::Process(args, o);
  }

  // Re-reads the log; returns whether pred holds within timeout.
  bool wait_for(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
    auto end = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      parse();
      if (pred()) return true;
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(10ms);
    }
  }

  // Worker id holding `rank` in the newest generation that completed a step.
  std::string worker_at_rank(int rank) {
    for (auto it = steps.rbegin(); it != steps.rend(); ++it)
      if (it->rank == rank) return it->worker;
    return "";
  }
  int64_t max_step() {
    int64_t m = 0;
    for (const auto& s : steps) m = std::max(m, s.step);
    return m;
  }

  int signal(const std::string& id, int sig) { return ::kill(procs_.at(id).pid(), sig); }
  // Shell-style exit status of worker `id`, -1 when it is still running after `timeout`.
  int exit_status(const std::string& id, std::chrono::milliseconds timeout) {
    const int status = procs_.at(id).wait(timeout);
    if (status >= 0) procs_.erase(id);
    return status;
  }

  // The finishing workers agree bitwise and hold the whole history.
  void check_done(const std::set<std::string>& finishers) {
    for (const auto& id : finishers) {
      INFO("worker " << id);
      REQUIRE(done.count(id));
      CHECK(done[id].step == steps_);
      CHECK(done[id].hist == std::to_string(process_reference_hist(steps_)));
      CHECK(done[id].crc == done[*finishers.begin()].crc);
      CHECK(exit_status(id, 10s) == 0);
    }
  }

  // The generation lines: worker -> (generation, size) in log order.
  std::vector<std::pair<std::string, std::pair<uint64_t, int>>> gens;
  edl::StoreServer& server() { return *server_; }

  std::vector<Step> steps;
  std::map<std::string, Done> done;
  std::vector<std::string> errors;
  struct Gen {
    std::string worker, role, reason;
    uint64_t gen = 0;
    int size = 0, previous_size = 0;
  };
  std::vector<Gen> gen_facts;  // the same lines with GenerationInfo's facts
  struct Outcome {
    std::string outcome, collective;
    int rank = 0, size = 0;
  };
  std::map<std::string, Outcome> outcomes;  // worker -> what run() returned and rank()/size() after it
  std::map<std::string, std::pair<int64_t, int64_t>> audits;  // worker -> (records trained once, records)
  std::vector<CatchUpLine> catchups;                          // stop-free newcomers' catch-up lines

 private:
  void parse() {
    std::ifstream f(log_);
    steps.clear();
    done.clear();
    errors.clear();
    gens.clear();
    gen_facts.clear();
    outcomes.clear();
    audits.clear();
    catchups.clear();
    std::string line;
    while (std::getline(f, line)) {
      std::istringstream is(line);
      std::string kind, worker;
      is >> kind >> worker;
      if (kind == "step") {
        Step s;
        s.worker = worker;
        is >> s.step >> s.gen >> s.rank >> s.size;
        steps.push_back(s);
      } else if (kind == "gen") {
        uint64_t g = 0;
        int rank = 0, size = 0, previous_size = 0, after_failure = 0;
        double t = 0, reform_ms = 0;
        std::string role, reason;
        is >> g >> rank >> size >> previous_size >> after_failure >> t >> reform_ms >> role >> reason;
        gens.push_back({worker, {g, size}});
        gen_facts.push_back(Gen{worker, role, reason, g, size, previous_size});
      } else if (kind == "outcome") {
        Outcome o;
        is >> o.outcome >> o.rank >> o.size >> o.collective;
        outcomes[worker] = o;
      } else if (kind == "done") {
        Done d;
        is >> d.step >> d.crc >> d.hist;
        done[worker] = d;
      } else if (kind == "audit") {
        int64_t once = 0, records = 0;
        is >> once >> records;
        audits[worker] = {once, records};
      } else if (kind == "catchup") {
        CatchUpLine c;
        c.worker = worker;
        is >> c.on >> c.step >> c.t;
        catchups.push_back(c);
      } else if (kind == "error") {
        errors.push_back(line);
      }
    }
  }

  std::string job_;
  int steps_;
  std::unique_ptr<edl::StoreServer> server_;
  std::string log_;
  std::map<std::string, edl::testing::Process> procs_;
};

}  // namespace edl::elastic::proc_test
