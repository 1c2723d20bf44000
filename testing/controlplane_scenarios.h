// Control-plane fault scenarios on emulated hosts (docs/multihost.md): each builds an EmulatedHosts
// job, trains to a steady state, injects one fault, checks what must happen and measures it. Shared
// by tests/multihost (which check `ok` and the counts, never the times) and bench/controlplane_bench
// (which reports the times against the targets of docs/benchmarks.md).
//
// Scenarios (store = the store kinds each applies to):
//   host_crash          redis|etcd|embedded  the last host crashes (link cut + SIGKILL of everything
//                                            on it); the others go on and finish with equal params
//   partition           redis|etcd|embedded  the last host's link is cut while it trains; the majority
//                                            goes on, the cut-off host's workers exit with an error,
//                                            no split brain; the link heals and the host rejoins
//   etcd_leader_kill    etcd                 SIGKILL of the etcd leader's member during training
//   etcd_follower_kill  etcd                 SIGKILL of a follower's member during training
//   redis_restart       redis                redis-server SIGKILLed and restarted (AOF) during training
//   store_host_crash    embedded             host 0 (which hosts the embedded store) crashes: every
//                                            other edl-run exits non-zero, no split brain
// Every scenario fails (ok = false) on split-brain steps; those where the job goes on also fail when
// committed steps were rolled back (lost_steps > 0: the runtime promises to lose no committed step).
//
// Thread-safety: run_scenario is blocking and uses process-wide namespace state: one at a time.
#pragma once

#include <string>
#include <vector>

namespace edl::testing {

struct ScenarioOptions {
  std::string store = "redis";  // redis | etcd | embedded
  int hosts = 3;
  std::string edl_run, worker;  // paths (required)
  bool keep_dir = false;        // keep the job's logs (the path is in ScenarioResult::dir)
  int lease_ms = 3000;          // EDL_LEASE_MS of the job (heartbeat = lease / 6)
  int store_timeout_ms = 5000;  // EDL_STORE_TIMEOUT_MS of the job (read by store clients that know it)
};

struct ScenarioResult {
  std::string scenario, store;
  int hosts = 0;
  double pause_ms = -1;       // last commit before the fault to the first after it (-1: none after)
  int lost_steps = 0;         // committed steps that were rolled back
  int split_brain_steps = 0;  // see commit_log.h
  double exit_s = -1;         // seconds from the fault until the side that must stop stopped (-1: n/a or never)
  bool ok = false;            // every check of the scenario held
  std::string detail;         // what failed, or a summary; log directory when kept
  std::string dir;
};

const std::vector<std::string>& scenario_names();
// "" when jobs on `store` can run here, else why not: no root / namespaces, redis-server or
// etcd + etcdctl not installed, or this build's store factory has no etcd:// scheme.
std::string store_unavailable(const std::string& store);
bool scenario_applies(const std::string& scenario, const std::string& store);
// Runs one scenario; failures of the job are reported in the result (ok = false, detail), harness
// failures (namespaces, missing programs) throw std::runtime_error.
ScenarioResult run_scenario(const std::string& scenario, const ScenarioOptions& options);

}  // namespace edl::testing
