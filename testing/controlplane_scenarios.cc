// The control-plane fault scenarios (see controlplane_scenarios.h and docs/multihost.md).
#include "testing/controlplane_scenarios.h"

#include <algorithm>
#include <initializer_list>
#include <map>
#include <set>
#include <stdexcept>
#include <thread>

#include <unistd.h>

#include "testing/commit_log.h"
#include "edl/error.h"
#include "edl/store.h"
#include "testing/deps.h"
#include "testing/emulated_hosts.h"
#include "testing/process.h"

namespace edl::testing {
namespace {

constexpr int kWarmSteps = 20;      // steps every host trains together before the fault
constexpr int kProgressSteps = 20;  // steps the survivors must train after it
constexpr double kWaitMs = 45000;   // bound of every wait for the job (a hang guard, not a target)
// Bound for the cut-off side to stop: a worker blocked in a collective may wait out its deadline
// (EDL_TIMEOUT_MS, 30 s by default) before its store client gives up; a hang guard as well.
constexpr double kStopWaitMs = 60000;

int64_t max_step(const CommitLog& l, const std::set<std::string>& hosts = {}) {
  int64_t m = -1;
  for (const Commit& c : l.commits)
    if (hosts.empty() || hosts.count(c.host)) m = std::max(m, c.step);
  return m;
}

// Highest step committed at or before `t` (-1: none).
int64_t step_at(const CommitLog& l, double t) {
  int64_t m = -1;
  for (const Commit& c : l.commits)
    if (c.mono_ms <= t) m = std::max(m, c.step);
  return m;
}

std::set<std::string> names_of(const std::vector<int>& hosts) {
  std::set<std::string> s;
  for (int h : hosts) s.insert(EmulatedHosts::host_name(h));
  return s;
}

// Tail of host h's edl-run output, for failure messages.
std::string tail(const EmulatedHosts& e, int h) {
  std::string ev = e.events(h);
  if (ev.size() > 600) ev = "..." + ev.substr(ev.size() - 600);
  return EmulatedHosts::host_name(h) + ": " + ev;
}

// Every host trains in one generation of full size for kWarmSteps steps.
bool warm_up(const EmulatedHosts& e, int full_size, ScenarioResult& r) {
  bool ok = e.wait_log(
      [&](const CommitLog& l) {
        int n = 0;
        for (const Commit& c : l.commits) n += c.size == full_size;
        return n >= kWarmSteps * full_size;
      },
      kWaitMs);
  if (!ok) r.detail = "no generation of " + std::to_string(full_size) + " workers trained " +
                      std::to_string(kWarmSteps) + " steps; " + tail(e, 0);
  return ok;
}

// Workers of `hosts` commit kProgressSteps steps beyond `base` after `since`.
bool progressed(const EmulatedHosts& e, const std::vector<int>& hosts, int64_t base, double since, ScenarioResult& r,
                const std::string& what) {
  std::set<std::string> names = names_of(hosts);
  bool ok = e.wait_log(
      [&](const CommitLog& l) {
        for (const Commit& c : l.commits)
          if (c.mono_ms > since && names.count(c.host) && c.step >= base + kProgressSteps) return true;
        return false;
      },
      kWaitMs);
  if (!ok) r.detail = what + ": the remaining hosts did not train " + std::to_string(kProgressSteps) + " more steps; " +
                      tail(e, hosts.front());
  return ok;
}

// Ends training on `hosts`: every worker stops at one step; their edl-runs exit 0 and every
// worker that finished holds the same parameters.
bool finish(EmulatedHosts& e, const std::vector<int>& hosts, ScenarioResult& r) {
  int64_t stop = max_step(e.log()) + 30;
  double since = EmulatedHosts::now_ms();
  e.stop_at(stop);
  for (int h : hosts) {
    int code = e.wait_exit(h, kWaitMs);
    if (code != 0) {
      r.detail = "finish: " + EmulatedHosts::host_name(h) + "'s edl-run " +
                 (code == -1 ? std::string("did not exit") : "exited with " + std::to_string(code)) + "; " + tail(e, h);
      return false;
    }
  }
  std::set<std::string> names = names_of(hosts);
  std::set<std::pair<int64_t, uint32_t>> ends;
  int done = 0;
  for (const WorkerEnd& w : e.log().ends) {
    if (!w.error && w.mono_ms > since && names.count(w.host)) {
      ends.insert({w.step, w.crc});
      ++done;
    }
  }
  if (done == 0 || ends.size() != 1 || ends.begin()->first != stop) {
    r.detail = "finish: " + std::to_string(done) + " workers finished with " + std::to_string(ends.size()) +
               " distinct (step, params) (expected one, at step " + std::to_string(stop) + ")";
    return false;
  }
  return true;
}

std::vector<int> all_but(int hosts, int victim) {
  std::vector<int> v;
  for (int h = 0; h < hosts; ++h)
    if (h != victim) v.push_back(h);
  return v;
}

// --- the scenarios: each returns whether its checks held (r.detail says which did not) --------

bool host_crash(EmulatedHosts& e, ScenarioResult& r, double* t_fault) {
  int victim = e.hosts() - 1;
  *t_fault = e.crash_host(victim);
  int64_t base = step_at(e.log(), *t_fault);
  std::vector<int> rest = all_but(e.hosts(), victim);
  return progressed(e, rest, base, *t_fault, r, "host crash") && finish(e, rest, r);
}

bool partition(EmulatedHosts& e, ScenarioResult& r, double* t_fault) {
  int victim = e.hosts() - 1;
  std::string vname = EmulatedHosts::host_name(victim);
  std::vector<int> rest = all_but(e.hosts(), victim);
  *t_fault = e.cut_link(victim);
  int64_t base = step_at(e.log(), *t_fault);
  if (!progressed(e, rest, base, *t_fault, r, "partition")) return false;
  // The cut-off host's workers must stop with an error (or its edl-run exit) on their own.
  double stopped = -1;
  e.wait_log(
      [&](const CommitLog& l) {
        const WorkerEnd* err = first_error_of_host(l, vname, *t_fault);
        if (err) stopped = err->mono_ms;
        else if (e.exit_code(victim) != -1) stopped = e.exit_time_ms(victim);
        return stopped > 0;
      },
      kStopWaitMs);
  if (stopped < 0) {
    r.detail = "partition: the cut-off " + vname + " kept its workers running for " +
               std::to_string(static_cast<int>(kStopWaitMs / 1000)) + " s; " + tail(e, victim);
    return false;
  }
  r.exit_s = (stopped - *t_fault) / 1000;
  // Heal; the host rejoins (its edl-run is restarted, as a node supervisor would, if it exited). Its
  // workers may report the lost store before its edl-run reaches the same verdict and exits: an
  // edl-run that exits after the heal is restarted too.
  double healed = EmulatedHosts::now_ms();
  e.heal_link(victim);
  bool restarted = false;
  bool back = e.wait_log(
      [&](const CommitLog& l) {
        if (!restarted && e.exit_code(victim) != -1) {
          e.start_host(victim);
          restarted = true;
        }
        return last_step_of_host(l, vname, healed) >= 0;
      },
      kWaitMs);
  if (!back) {
    r.detail = "partition: " + vname + " did not rejoin after the link healed; " + tail(e, victim);
    return false;
  }
  return finish(e, all_but(e.hosts(), -1), r);
}

bool etcd_member_kill(EmulatedHosts& e, ScenarioResult& r, double* t_fault, bool leader) {
  int lead = -1;
  for (int i = 0; i < 50 && lead < 0; ++i) {
    lead = e.etcd_leader();
    if (lead < 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (lead < 0) {
    r.detail = "no etcd leader found";
    return false;
  }
  int victim = leader ? lead : (lead + 1) % e.hosts();
  *t_fault = e.kill_etcd(victim);
  int64_t base = step_at(e.log(), *t_fault);
  std::vector<int> every = all_but(e.hosts(), -1);
  return progressed(e, every, base, *t_fault, r, leader ? "etcd leader kill" : "etcd follower kill") &&
         finish(e, every, r);
}

bool redis_restart(EmulatedHosts& e, ScenarioResult& r, double* t_fault) {
  *t_fault = e.kill_redis();
  int64_t base = step_at(e.log(), *t_fault);
  e.start_redis();
  std::vector<int> every = all_but(e.hosts(), -1);
  return progressed(e, every, base, *t_fault, r, "redis restart") && finish(e, every, r);
}

bool store_host_crash(EmulatedHosts& e, ScenarioResult& r, double* t_fault) {
  *t_fault = e.crash_host(0);
  double last = -1;
  for (int h = 1; h < e.hosts(); ++h) {
    int code = e.wait_exit(h, kStopWaitMs);
    if (code == -1 || code == 0) {
      r.detail = "store host crash: " + EmulatedHosts::host_name(h) + "'s edl-run " +
                 (code == -1 ? std::string("did not exit") : "exited 0") + "; " + tail(e, h);
      return false;
    }
    last = std::max(last, e.exit_time_ms(h));
  }
  r.exit_s = (last - *t_fault) / 1000;
  return true;
}

}  // namespace

const std::vector<std::string>& scenario_names() {
  static const std::vector<std::string> names = {"host_crash",         "partition",     "etcd_leader_kill",
                                                 "etcd_follower_kill", "redis_restart", "store_host_crash"};
  return names;
}

std::string store_unavailable(const std::string& store) {
  std::string why = NetnsCluster::unsupported_reason();
  if (!why.empty()) return why;
  // "" when every program is installed, else which are not, each with its Debian package
  // (testing/deps_programs.txt, the table scripts/install-deps.sh is checked against).
  auto missing = [](std::initializer_list<const char*> programs) {
    std::string m;
    for (const char* p : programs)
      if (find_program(p).empty()) m += (m.empty() ? "" : ", ") + std::string(p) + " (Debian " + program_package(p) + ")";
    return m.empty() ? m : m + " not installed";
  };
  if (store == "redis" && !missing({"redis-server"}).empty()) return missing({"redis-server"});
  if (store == "etcd") {
    if (const std::string m = missing({"etcd", "etcdctl"}); !m.empty()) return m;
    try {
      StoreOptions o;
      o.connect_timeout = std::chrono::milliseconds(200);
      connect_store("etcd://127.0.0.1:1", o);  // nothing listens there: only the scheme matters
    } catch (const InvalidArgument& e) {
      if (std::string(e.what()).find("unknown scheme") != std::string::npos)
        return std::string("this build has no etcd:// store: ") + e.what();
    } catch (const std::exception&) {  // a connection error: the scheme is known
    }
  }
  return "";
}

bool scenario_applies(const std::string& scenario, const std::string& store) {
  if (scenario == "host_crash" || scenario == "partition") return true;
  if (scenario == "etcd_leader_kill" || scenario == "etcd_follower_kill") return store == "etcd";
  if (scenario == "redis_restart") return store == "redis";
  if (scenario == "store_host_crash") return store == "embedded";
  return false;
}

ScenarioResult run_scenario(const std::string& scenario, const ScenarioOptions& o) {
  if (!scenario_applies(scenario, o.store))
    throw std::invalid_argument("scenario '" + scenario + "' does not apply to store '" + o.store + "'");
  ScenarioResult r;
  r.scenario = scenario;
  r.store = o.store;
  r.hosts = o.hosts;
  EmulatedHostsOptions eo;
  eo.hosts = o.hosts;
  eo.store = o.store;
  eo.edl_run = o.edl_run;
  eo.worker = o.worker;
  eo.keep_dir = o.keep_dir;
  eo.min_np = o.hosts - 1;
  eo.env = {"EDL_LEASE_MS=" + std::to_string(o.lease_ms), "EDL_HEARTBEAT_MS=" + std::to_string(std::max(50, o.lease_ms / 6)),
            "EDL_STORE_TIMEOUT_MS=" + std::to_string(o.store_timeout_ms)};
  eo.run_args = {"--rendezvous-timeout", "20", "--grace-period", "2"};
  EmulatedHosts e(eo);
  r.dir = e.dir();
  double t_fault = -1;
  bool ok = warm_up(e, o.hosts, r);
  if (ok) {
    if (scenario == "host_crash") ok = host_crash(e, r, &t_fault);
    else if (scenario == "partition") ok = partition(e, r, &t_fault);
    else if (scenario == "etcd_leader_kill") ok = etcd_member_kill(e, r, &t_fault, true);
    else if (scenario == "etcd_follower_kill") ok = etcd_member_kill(e, r, &t_fault, false);
    else if (scenario == "redis_restart") ok = redis_restart(e, r, &t_fault);
    else ok = store_host_crash(e, r, &t_fault);
  }
  CommitLog log = e.log();
  if (t_fault > 0) {  // the pause up to the first commit kProgressSteps beyond the step at the fault
    int64_t base = step_at(log, t_fault);
    double end = -1;
    for (const Commit& c : log.commits)
      if (c.mono_ms > t_fault && c.step >= base + kProgressSteps && (end < 0 || c.mono_ms < end)) end = c.mono_ms;
    if (end > 0) r.pause_ms = pause_ms(log, t_fault, end);
  }
  r.lost_steps = lost_steps(log);
  r.split_brain_steps = split_brain_steps(log);
  if (r.split_brain_steps > 0) {
    ok = false;
    r.detail += (r.detail.empty() ? "" : "; ") + std::to_string(r.split_brain_steps) + " split-brain steps";
  }
  // The runtime loses no committed progress (docs/elastic.md): a job that goes on after the fault
  // must not redo committed steps (e.g. workers restarted from scratch after a store fault).
  if (r.lost_steps > 0 && scenario != "store_host_crash") {
    ok = false;
    r.detail += (r.detail.empty() ? "" : "; ") + std::to_string(r.lost_steps) + " committed steps were rolled back";
  }
  r.ok = ok;
  if (o.keep_dir) r.detail += (r.detail.empty() ? "" : "; ") + std::string("logs in ") + e.dir();
  return r;
}

}  // namespace edl::testing
