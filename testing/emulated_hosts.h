// EmulatedHosts: a multi-host EDL job on this one machine (docs/multihost.md). On top of a
// NetnsCluster (netns.h) every emulated host is a network namespace with its own address
// (10.77.0.<h+1>) on one bridge, running its own `edl-run --hostname host<h>` with the training
// program testing/multihost_worker; the control-plane store runs inside the namespaces:
//   redis    - redis-server (AOF on) in a separate "store host" namespace (10.77.0.<H+1>:6379);
//   etcd     - one etcd member per host, in the host's namespace (10.77.0.<h+1>:2379/2380);
//   embedded - host 0's edl-run hosts the store (--store-bind 10.77.0.1), the others connect to it.
// Faults: crash a host (its link is cut, then everything in its namespace gets SIGKILL, so peers see
// silence as after a power loss), cut / heal a host's link (the switch-side veth down / up: packets
// are dropped silently in both directions), kill / restart store processes.
//
// Every process started here runs in its own process group with PR_SET_PDEATHSIG=SIGKILL; the
// destructor kills everything left in the namespaces and removes them (NetnsCluster also removes
// them on SIGINT/SIGTERM/SIGHUP/SIGQUIT and at exit) and deletes the work directory unless
// `keep_dir`. Root only (NetnsCluster::unsupported_reason()).
//
// Thread-safety: one thread owns an EmulatedHosts; nothing here is safe to call concurrently.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "testing/commit_log.h"
#include "testing/netns.h"
#include "testing/process.h"

namespace edl::testing {

struct EmulatedHostsOptions {
  int hosts = 3;                      // emulated hosts, 1 edl-run each
  std::string store = "redis";        // redis | etcd | embedded
  int slots = 1;                      // workers per host (edl-run -np)
  int min_np = 2;                     // job-wide --min-np
  double step_ms = 20;                // worker "compute" per step
  size_t params = 4096;               // floats of the toy model
  std::string edl_run;                // path of edl-run (required)
  std::string worker;                 // path of multihost_worker (required)
  std::vector<std::string> env;       // extra NAME=value for every edl-run and worker (e.g. EDL_LEASE_MS=3000)
  std::vector<std::string> run_args;  // extra edl-run flags (e.g. --reset-limit 10)
  bool keep_dir = false;              // keep the work directory (logs) after destruction
};

class EmulatedHosts {
 public:
  // Builds the namespaces, starts the store and one edl-run per host. Throws std::runtime_error
  // naming what failed (everything created before is removed).
  explicit EmulatedHosts(const EmulatedHostsOptions& options);
  ~EmulatedHosts();
  EmulatedHosts(const EmulatedHosts&) = delete;
  EmulatedHosts& operator=(const EmulatedHosts&) = delete;

  int hosts() const { return options_.hosts; }
  static std::string host_name(int h) { return "host" + std::to_string(h); }
  const std::string& dir() const { return dir_; }
  const std::string& store_url() const { return store_url_; }
  static double now_ms();  // CLOCK_MONOTONIC, the clock of the commit log

  // --- the job ---------------------------------------------------------------------------------
  void start_host(int h);                 // (re)starts host h's edl-run (after a crash or an exit)
  CommitLog log() const;                  // the commit log so far
  std::string events(int h) const;        // host h's edl-run output (event log and worker lines)
  // Waits until `pred(log())` holds (polling every 50 ms); false after timeout_ms.
  template <typename Pred>
  bool wait_log(Pred pred, double timeout_ms) const;
  // Ends training: every worker stops at the step written here (must be ahead of all of them).
  void stop_at(int64_t step);
  // Exit code of host h's edl-run (128+signal when killed), or -1 while it runs; reaps it.
  int exit_code(int h);
  // Waits for host h's edl-run to exit; its code, or -1 after timeout_ms (it keeps running).
  int wait_exit(int h, double timeout_ms);
  // Monotonic ms at which host h's edl-run was seen to exit (-1 if not yet).
  double exit_time_ms(int h) const { return exit_ms_.at(h); }

  // --- faults: each returns now_ms() right after it took effect (the fault time) ------------------
  double crash_host(int h);               // cut link (the fault time), SIGKILL everything in the namespace
  double cut_link(int h);                 // switch-side veth down (silent drop both ways)
  void heal_link(int h);
  double kill_redis();                    // SIGKILL redis-server
  void start_redis();                     // (re)start it on the same address and AOF directory
  int etcd_leader();                      // host index of the etcd leader (-1 if none is known)
  double kill_etcd(int h);                // SIGKILL host h's etcd member

 private:
  pid_t spawn(int ns_index, const std::vector<std::string>& argv, const std::string& out_path,
              bool with_job_env);
  void kill_namespace(int ns_index);
  void teardown() noexcept;
  void start_etcd(int h);
  void wait_tcp(int ns_index, const std::string& addr, int port, double timeout_ms);
  std::string read_text(const std::string& path) const;

  EmulatedHostsOptions options_;
  std::unique_ptr<NetnsCluster> net_;
  std::string dir_, store_url_, secret_, job_id_;
  std::vector<pid_t> runs_;        // edl-run per host (-1 = not running)
  std::vector<double> exit_ms_;    // when each edl-run was seen to exit
  std::vector<int> exit_codes_;
  std::vector<int> starts_;        // how many times each host's edl-run was started
  pid_t redis_ = -1;
  std::vector<pid_t> etcd_;
};

template <typename Pred>
bool EmulatedHosts::wait_log(Pred pred, double timeout_ms) const {
  double deadline = now_ms() + timeout_ms;
  while (now_ms() < deadline) {
    if (pred(log())) return true;
    struct timespec ts{0, 50 * 1000 * 1000};
    nanosleep(&ts, nullptr);
  }
  return pred(log());
}

}  // namespace edl::testing
