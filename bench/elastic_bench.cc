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
#include "common/elastic_job.h"

#ifndef EDL_RUN_PATH
#define EDL_RUN_PATH "edl-run"
#endif
#ifndef EDL_ELASTIC_WORKER_PATH
#define EDL_ELASTIC_WORKER_PATH "elastic_worker"
#endif

namespace {

using namespace edl::bench;

// The committed steps the survivors rolled back: the highest step any worker other than `excluded`
// committed in generation `old_gen` minus the step the new generation resumed from (its first
// completed step - 1). Not clamped at 0.
int64_t rolled_back(const WorkerLog& log, uint64_t old_gen, const std::string& excluded, const StepLine& first) {
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
EventRow fault_event(ElasticJob& job, const std::string& kind, int workers, std::mt19937& rng) {
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

EventRow join_event(ElasticJob& job, int workers) {
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
double rerendezvous(ElasticJob& job, int n) {
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
  install_job_cleanup();
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
    ElasticJobOptions fo;
    fo.edl_run = edl_run;
    fo.worker = worker;
    fo.dir = dir;
    fo.tag = "faults";
    fo.np = W;
    fo.min_np = 2;
    fo.max_np = W + 1;
    fo.step_ms = step_ms;
    fo.params = params;
    // Restart killed workers only after a pause, so a kill shows the shrink (3 -> 2) before the
    // replacement joins again.
    fo.restart_cooldown_s = a["restart-cooldown-s"].as<int>();
    ElasticJob job(fo);
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
      ElasticJobOptions ro;
      ro.edl_run = edl_run;
      ro.worker = worker;
      ro.dir = dir;
      ro.tag = "rdzv" + std::to_string(n);
      ro.np = n - 1;
      ro.min_np = 1;
      ro.max_np = n;
      ro.step_ms = std::max(step_ms, 30.0);
      ro.params = 4096;
      ElasticJob j(ro);
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
