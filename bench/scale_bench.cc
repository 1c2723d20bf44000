// scale_bench: an elastic job of many real processes on this machine (issue 25): start, kill -9 of
// one rank, join of one rank, with the control plane's cost per rank.
//
//   scale_bench [--ranks 16,64] [--store embedded,redis,etcd] [--kills 3] [--step-ms 200] [--params 256]
//               [--cooldown-s 3] [--phase-timeout-s 300] [--lease-ms 0] [--keep-logs] [--json PATH]
//
// For each store and each N, edl-run starts N synthetic workers (testing/elastic_worker.cc: a tiny
// model, one averaged allreduce per step, commit every step) with --min-np N-1 --max-np N:
//   start — from the moment the last of the first generation's processes started (its first log
//           line) until every rank of it completed a step: rendezvous + mesh + first allreduce
//           (spawn_ms: edl-run's launch until that last process start);
//   kill  — kill -9 of a random rank until every member of the next generation completed a step;
//   join  — edl-run restarts the killed slot after --cooldown-s: from the replacement's process
//           start until every member of the generation that admitted it completed a step (the
//           recovery's generation itself when the recovery took longer than the cooldown).
// One row per store, N and phase: {"ranks","phase","store","ms" (median over the events),"ms_max",
// "events","spawn_ms","cpu_ms_per_rank" (CPU time of all workers during the phase / N, median),
// "sockets_per_rank" (most sockets any worker holds after the phase),"sockets_target" (2 log2 N + 4),
// "store_ops_per_s" (requests the store served during the phase / its length),"store_cpu_ms",
// "evictions" (members of a generation missing from the next one that the bench did not kill),"ok"},
// and "lease_ms" when --lease-ms gave the job a lease other than the default (EDL_LEASE_MS).
// The embedded store is the StoreServer edl-run embeds, hosted here (edl-run --store tcp://...) so
// that its requests and its loop thread's CPU time are counted; redis is a private redis-server per
// job (testing/redis_server.h): its CPU time and INFO's total_commands_processed; etcd is a private
// 3-member cluster (testing/etcd_cluster.h): its members' CPU time and grpc_server_msg_received_total.
// Exit 1 when a row is not ok (or a phase failed), 2 on bad flags.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <cxxopts.hpp>

#include "common/bench_util.h"
#include "common/elastic_job.h"
#include "edl/store_server.h"
#include "testing/etcd_cluster.h"
#include "testing/process.h"
#include "testing/redis_server.h"

#ifndef EDL_RUN_PATH
#define EDL_RUN_PATH "edl-run"
#endif
#ifndef EDL_ELASTIC_WORKER_PATH
#define EDL_ELASTIC_WORKER_PATH "elastic_worker"
#endif

namespace {

using namespace edl::bench;

// The store of a run and what it served: the embedded StoreServer, a private redis-server (one
// per job), or a private etcd cluster.
class StoreUnderTest {
 public:
  StoreUnderTest(std::string kind, edl::testing::EtcdCluster* etcd) : kind_(std::move(kind)), etcd_(etcd) {
    if (kind_ == "embedded") {
      edl::StoreServerOptions so;
      so.secret = "scale-bench-secret";
      server_ = std::make_unique<edl::StoreServer>(so);
    } else if (kind_ == "redis") {
      redis_ = std::make_unique<edl::testing::RedisServer>();
    }
  }
  std::string url() const { return server_ ? server_->url() : redis_ ? redis_->url() : etcd_->url(); }
  std::string secret() const { return server_ ? "scale-bench-secret" : ""; }
  // Requests served so far and the store's CPU time (ms).
  std::pair<double, double> counters() const {
    if (server_) return {static_cast<double>(server_->request_count()), server_->cpu_time().count() / 1e6};
    if (redis_) return {redis_->commands_processed(), std::max(0.0, cpu_ms_of(redis_->pid()))};
    double req = 0, cpu = 0;
    for (int i = 0; i < etcd_->size(); ++i) {
      std::istringstream m(etcd_->metrics(i));
      for (std::string line; std::getline(m, line);)
        if (line.rfind("grpc_server_msg_received_total{", 0) == 0) req += std::stod(line.substr(line.rfind(' ') + 1));
      cpu += std::max(0.0, cpu_ms_of(etcd_->pid(i)));
    }
    return {req, cpu};
  }
  // etcd only: messages per gRPC method and raft proposals committed (the leader's count), so far.
  std::map<std::string, double> by_method() const {
    std::map<std::string, double> out;
    if (!etcd_) return out;
    double proposals = 0;
    for (int i = 0; i < etcd_->size(); ++i) {
      std::istringstream m(etcd_->metrics(i));
      for (std::string line; std::getline(m, line);) {
        if (line.rfind("etcd_server_proposals_committed_total ", 0) == 0)
          proposals = std::max(proposals, std::stod(line.substr(line.rfind(' ') + 1)));
        if (line.rfind("grpc_server_msg_received_total{", 0) != 0) continue;
        auto at = line.find("grpc_method=\"");
        if (at == std::string::npos) continue;
        at += 13;
        out[line.substr(at, line.find('"', at) - at)] += std::stod(line.substr(line.rfind(' ') + 1));
      }
    }
    out["(raft proposals)"] = proposals;
    return out;
  }

 private:
  std::string kind_;
  edl::testing::EtcdCluster* etcd_;
  std::unique_ptr<edl::StoreServer> server_;
  std::unique_ptr<edl::testing::RedisServer> redis_;
};

// The first step time of every worker in every generation, kept up to date from the log.
class FirstSteps {
 public:
  void update(const WorkerLog& log) {
    for (; seen_ < log.steps.size(); ++seen_) {
      const StepLine& s = log.steps[seen_];
      auto& g = gens_[s.gen];
      g.size = s.size;
      g.first.emplace(s.worker, s.t);  // keeps the first
    }
  }
  // The oldest generation >= min_gen of at least min_size members whose every member completed a
  // step (with `member` among them when given): its id, and the time its slowest member completed its
  // first step.
  bool complete(uint64_t min_gen, int min_size, const std::string& member, uint64_t* gen, double* t_done) const {
    for (auto it = gens_.lower_bound(min_gen); it != gens_.end(); ++it) {
      const auto& g = it->second;
      if (g.size < min_size || static_cast<int>(g.first.size()) < g.size) continue;
      if (!member.empty() && !g.first.count(member)) continue;
      *gen = it->first;
      *t_done = 0;
      for (const auto& [w, t] : g.first) *t_done = std::max(*t_done, t);
      return true;
    }
    return false;
  }
  std::vector<std::string> members(uint64_t gen) const {
    std::vector<std::string> out;
    auto it = gens_.find(gen);
    if (it != gens_.end())
      for (const auto& [w, t] : it->second.first) out.push_back(w);
    return out;
  }

 private:
  struct Gen {
    int size = 0;
    std::map<std::string, double> first;
  };
  std::map<uint64_t, Gen> gens_;
  size_t seen_ = 0;
};

// What one event of a phase cost.
struct Event {
  double ms = 0, spawn_ms = -1, cpu_ms_per_rank = 0, store_ops_per_s = 0, store_cpu_ms = 0;
  int sockets = 0;
  uint64_t gen = 0;  // the generation the event ended in
  std::map<std::string, double> ops_per_rank;  // etcd: messages per gRPC method / ranks
};

// CPU time of the workers, the store's counters and the time at the opening of a measuring window.
class Window {
 public:
  Window(ElasticJob& job, const StoreUnderTest& store) : job_(job), store_(store) {
    t0_ = now_ms();
    for (const auto& [w, pid] : job.log().pid) cpu0_[pid] = std::max(0.0, cpu_ms_of(pid));
    store0_ = store.counters();
    methods0_ = store.by_method();
  }
  // Closes the window at `t_end` (ms, the event's end) with n ranks; fills the event's costs.
  void close(int n, Event* e) {
    job_.log().poll();
    double cpu = 0;
    std::vector<int> sockets;
    for (const auto& [w, pid] : job_.log().pid) {
      double now = cpu_ms_of(pid);
      if (now < 0) continue;  // the killed one: its last moments are not counted
      auto it = cpu0_.find(pid);
      cpu += now - (it == cpu0_.end() ? 0.0 : it->second);
      sockets.push_back(sockets_of(pid));
    }
    auto [req, store_cpu] = store_.counters();
    const double secs = std::max(1e-3, (now_ms() - t0_) / 1000.0);
    e->cpu_ms_per_rank = cpu / n;
    e->sockets = sockets.empty() ? 0 : *std::max_element(sockets.begin(), sockets.end());
    e->store_ops_per_s = (req - store0_.first) / secs;
    e->store_cpu_ms = store_cpu - store0_.second;
    for (const auto& [m, count] : store_.by_method())
      if (count > methods0_[m]) e->ops_per_rank[m] = (count - methods0_[m]) / n;
  }

 private:
  ElasticJob& job_;
  const StoreUnderTest& store_;
  double t0_ = 0;
  std::map<int, double> cpu0_;
  std::pair<double, double> store0_;
  std::map<std::string, double> methods0_;
};

struct Settings {
  std::string edl_run, worker, dir;
  int kills = 3, cooldown_s = 3;
  double step_ms = 200, phase_timeout_ms = 300000;
  size_t params = 256;
};

// Members of a generation missing from the next one, per generation, from edl-run's event log
// ("event=generation gen=G ... left=a,b").
std::map<uint64_t, std::vector<std::string>> departures(const std::string& edl_run_output) {
  std::map<uint64_t, std::vector<std::string>> out;
  std::istringstream in(slurp(edl_run_output));
  for (std::string line; std::getline(in, line);) {
    auto e = line.find("event=generation gen=");
    auto l = line.find(" left=");
    if (e == std::string::npos || l == std::string::npos) continue;
    uint64_t g = std::stoull(line.substr(e + 21));
    std::string list = line.substr(l + 6, line.find(' ', l + 6) - (l + 6));
    out[g] = split(list);
  }
  return out;
}

// One job of n workers: start, then `kills` rounds of kill + join. Returns the events per phase.
std::map<std::string, std::vector<Event>> run_job(const Settings& s, StoreUnderTest& store, const std::string& kind, int n,
                                                  int* evictions, int* errors, std::mt19937& rng) {
  ElasticJobOptions o;
  o.edl_run = s.edl_run;
  o.worker = s.worker;
  o.dir = s.dir;
  o.tag = "scale-" + kind + "-" + std::to_string(n);
  o.np = n;
  o.min_np = std::max(1, n - 1);
  o.max_np = n;
  o.step_ms = s.step_ms;
  o.params = s.params;
  o.restart_cooldown_s = s.cooldown_s;
  o.discovery = false;
  o.store_url = store.url();
  o.secret = store.secret();
  std::map<std::string, std::vector<Event>> events;
  FirstSteps first;
  std::set<std::string> killed;
  const double t_launch = now_ms();
  ElasticJob job(o);
  Window start_window(job, store);
  Event e;
  job.wait("the first generation of " + std::to_string(n) + " to train", s.phase_timeout_ms, [&] {
    first.update(job.log());
    double t_done = 0;
    if (!first.complete(0, n, "", &e.gen, &t_done)) return false;
    double last_start = 0;
    for (const auto& w : first.members(e.gen))
      for (const auto& [sw, t] : job.log().starts)
        if (sw == w) last_start = std::max(last_start, t);
    e.ms = t_done - last_start;
    e.spawn_ms = last_start - t_launch;
    return true;
  });
  start_window.close(n, &e);
  events["start"].push_back(e);
  for (int k = 0; k < s.kills; ++k) {
    uint64_t g0 = job.wait_stable(n, 3, s.phase_timeout_ms);
    first.update(job.log());  // wait_stable read lines that `first` has not seen yet
    auto members = first.members(g0);
    if (members.empty()) throw std::runtime_error("no member of generation " + std::to_string(g0) + " in the log");
    std::string victim = members[rng() % members.size()];
    killed.insert(victim);
    size_t starts_before = job.log().starts.size();
    Window kill_window(job, store);
    const double t0 = now_ms();
    ::kill(job.log().pid.at(victim), SIGKILL);
    Event ek;
    job.wait("recovery after kill -9 of " + victim, s.phase_timeout_ms, [&] {
      first.update(job.log());
      double t_done = 0;
      if (!first.complete(g0 + 1, 1, "", &ek.gen, &t_done)) return false;
      ek.ms = t_done - t0;
      return true;
    });
    kill_window.close(n - 1, &ek);
    events["kill"].push_back(ek);
    std::string newcomer;
    double t_start = 0;
    job.wait("the replacement of " + victim + " to start", s.phase_timeout_ms, [&] {
      if (job.log().starts.size() <= starts_before) return false;
      std::tie(newcomer, t_start) = job.log().starts[starts_before];
      return true;
    });
    Window join_window(job, store);
    Event ej;
    job.wait("the replacement " + newcomer + " to train", s.phase_timeout_ms, [&] {
      first.update(job.log());
      double t_done = 0;
      // The generation that admitted it: the recovery's own when the recovery outlasted the cooldown.
      if (!first.complete(ek.gen, 1, newcomer, &ej.gen, &t_done)) return false;
      ej.ms = t_done - t_start;
      return true;
    });
    join_window.close(n, &ej);
    events["join"].push_back(ej);
  }
  job.wait_stable(n, 2, s.phase_timeout_ms);
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // edl-run's watcher logs the last generation
  for (const auto& [g, left] : departures(job.output_path()))
    for (const auto& w : left) *evictions += killed.count(w) ? 0 : 1;
  for (const auto& err : job.log().errors) std::printf("worker error: %s\n", err.c_str());
  *errors += static_cast<int>(job.log().errors.size());
  job.stop();
  return events;
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options opts("scale_bench", "An elastic job of many processes: start, kill -9, join; control-plane cost per rank");
  opts.add_options()
    ("ranks", "job sizes (processes)", cxxopts::value<std::string>()->default_value("16,64"))
    ("store", "stores: embedded, redis, etcd", cxxopts::value<std::string>()->default_value("embedded"))
    ("kills", "kill -9 (and join) events per job", cxxopts::value<int>()->default_value("3"))
    ("step-ms", "compute time of one step", cxxopts::value<double>()->default_value("200"))
    ("params", "model size (floats)", cxxopts::value<size_t>()->default_value("256"))
    ("cooldown-s", "edl-run restarts a killed worker after this pause", cxxopts::value<int>()->default_value("3"))
    ("phase-timeout-s", "give up a phase after this long", cxxopts::value<double>()->default_value("300"))
    ("lease-ms", "EDL_LEASE_MS of the jobs (0: the default)", cxxopts::value<int>()->default_value("0"))
    ("edl-run", "path of edl-run", cxxopts::value<std::string>()->default_value(EDL_RUN_PATH))
    ("worker", "path of the synthetic worker", cxxopts::value<std::string>()->default_value(EDL_ELASTIC_WORKER_PATH))
    ("seed", "random seed (victims)", cxxopts::value<unsigned>()->default_value("7"))
    ("keep-logs", "keep the logs of successful runs")
    ("json", "write JSON rows to PATH", cxxopts::value<std::string>()->default_value(""))
    ("h,help", "help");
  auto a = parse_flags(opts, argc, argv);
  if (a.count("help")) {
    std::printf("%s\n", opts.help().c_str());
    return 0;
  }
  Settings s;
  s.edl_run = a["edl-run"].as<std::string>();
  s.worker = a["worker"].as<std::string>();
  s.kills = a["kills"].as<int>();
  s.cooldown_s = a["cooldown-s"].as<int>();
  s.step_ms = a["step-ms"].as<double>();
  s.params = a["params"].as<size_t>();
  s.phase_timeout_ms = a["phase-timeout-s"].as<double>() * 1000;
  std::vector<int> ranks;
  auto bad = [](const std::string& flag, const std::string& want, const std::string& got) {
    std::fprintf(stderr, "scale_bench: %s wants %s, got '%s' (run with --help for usage)\n", flag.c_str(), want.c_str(),
                 got.c_str());
    return 2;
  };
  for (const auto& r : split(a["ranks"].as<std::string>())) {
    char* end = nullptr;
    long v = std::strtol(r.c_str(), &end, 10);
    if (*end != '\0' || v < 2 || v > 100000) return bad("--ranks", "job sizes of at least 2", r);
    ranks.push_back(static_cast<int>(v));
  }
  if (ranks.empty()) return bad("--ranks", "job sizes of at least 2", a["ranks"].as<std::string>());
  std::vector<std::string> stores = split(a["store"].as<std::string>());
  for (const auto& st : stores)
    if (st != "embedded" && st != "etcd" && st != "redis") return bad("--store", "embedded, redis and/or etcd", st);
  if (s.kills < 0) return bad("--kills", "a count >= 0", std::to_string(s.kills));
  if (s.cooldown_s < 0) return bad("--cooldown-s", "seconds >= 0", std::to_string(s.cooldown_s));
  if (!(s.step_ms > 0)) return bad("--step-ms", "a positive time", fmt(s.step_ms));
  if (s.params == 0) return bad("--params", "a positive size", "0");
  if (!(s.phase_timeout_ms > 0)) return bad("--phase-timeout-s", "a positive time", fmt(s.phase_timeout_ms / 1000));
  const int lease_ms = a["lease-ms"].as<int>();
  if (lease_ms < 0) return bad("--lease-ms", "milliseconds >= 0", std::to_string(lease_ms));
  if (lease_ms > 0) ::setenv("EDL_LEASE_MS", std::to_string(lease_ms).c_str(), 1);  // edl-run and its workers inherit it
  install_job_cleanup();
  char tmpl[] = "/tmp/edl_scale_bench_XXXXXX";
  if (!::mkdtemp(tmpl)) {
    std::perror("scale_bench: mkdtemp");
    return 1;
  }
  s.dir = tmpl;
  std::printf("scale_bench: logs in %s\n", s.dir.c_str());
  JsonRows json(a["json"].as<std::string>());
  std::mt19937 rng(a["seed"].as<unsigned>());
  Table t({"store", "ranks", "phase", "ms", "ms_max", "cpu_ms/rank", "sockets", "store_ops/s", "evictions", "ok"});
  t.header();
  bool all_ok = true;
  for (const auto& kind : stores) {
    std::unique_ptr<edl::testing::EtcdCluster> etcd;
    if (kind == "etcd") {
      etcd = std::make_unique<edl::testing::EtcdCluster>(3);
      if (!etcd->available()) {
        std::printf("scale_bench: etcd is not installed; skipping the etcd store\n");
        continue;
      }
    }
    if (kind == "redis" && edl::testing::find_program("redis-server").empty()) {
      std::printf("scale_bench: redis-server is not installed; skipping the redis store\n");
      continue;
    }
    for (int n : ranks) {
      StoreUnderTest store(kind, etcd.get());
      int evictions = 0, errors = 0;
      std::map<std::string, std::vector<Event>> ev;
      bool ok = true;
      try {
        ev = run_job(s, store, kind, n, &evictions, &errors, rng);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "scale_bench: %s store, %d ranks: %s (logs in %s)\n", kind.c_str(), n, e.what(), s.dir.c_str());
        ok = false;
      }
      ok = ok && errors == 0;
      all_ok = all_ok && ok && evictions == 0;
      for (const char* phase : {"start", "kill", "join"}) {
        const auto& v = ev[phase];
        auto pick = [&](double Event::*f) {
          std::vector<double> x;
          for (const auto& e : v) x.push_back(e.*f);
          return x.empty() ? 0.0 : median(x);
        };
        double ms_max = 0;
        int sockets = 0;
        for (const auto& e : v) {
          ms_max = std::max(ms_max, e.ms);
          sockets = std::max(sockets, e.sockets);
        }
        const bool row_ok = ok && evictions == 0 && (!v.empty() || (std::string(phase) != "start" && s.kills == 0));
        const int target = 2 * static_cast<int>(std::ceil(std::log2(n))) + 4;
        for (const auto& e : v) {  // etcd: what each event cost the store per rank, by gRPC method
          if (e.ops_per_rank.empty()) continue;
          std::string line;
          for (const auto& [m, c] : e.ops_per_rank) line += " " + m + "=" + fmt(c, 1);
          std::printf("# %s %d %s %.0f ms: etcd messages per rank:%s\n", kind.c_str(), n, phase, e.ms, line.c_str());
        }
        t.row({kind, std::to_string(n), phase, fmt(pick(&Event::ms), 1), fmt(ms_max, 1), fmt(pick(&Event::cpu_ms_per_rank), 1),
               std::to_string(sockets), fmt(pick(&Event::store_ops_per_s), 0), std::to_string(evictions), row_ok ? "yes" : "NO"});
        if (v.empty() && row_ok) continue;
        Json row{{"ranks", n}, {"phase", phase}, {"store", kind}, {"ms", pick(&Event::ms)}, {"ms_max", ms_max},
                 {"events", v.size()}, {"cpu_ms_per_rank", pick(&Event::cpu_ms_per_rank)}, {"sockets_per_rank", sockets},
                 {"sockets_target", target}, {"store_ops_per_s", pick(&Event::store_ops_per_s)},
                 {"store_cpu_ms", pick(&Event::store_cpu_ms)}, {"evictions", evictions}, {"ok", row_ok}};
        if (std::string(phase) == "start" && !v.empty()) row["spawn_ms"] = v.front().spawn_ms;
        if (lease_ms > 0) row["lease_ms"] = lease_ms;
        json.write(row);
      }
    }
  }
  if (all_ok && !a.count("keep-logs")) {
    std::error_code ec;
    std::filesystem::remove_all(s.dir, ec);
  }
  return all_ok ? 0 : 1;
}
