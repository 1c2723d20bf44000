// SlurmCluster: a real Slurm cluster on this one machine (docs/launcher.md, "Slurm"), for the Slurm
// scenarios (testing/slurm_scenarios.h) of tests/slurm and bench/slurm_bench. On top of a
// NetnsCluster (netns.h) every emulated node is a network namespace with its own address
// (10.77.0.<i+1>) running its own `slurmd -N n<i>` (node name n<i>, spool directory
// <dir>/spool/n<i>, NodeAddr = the namespace's address); slurmctld runs in one more "controller"
// namespace (10.77.0.<N+1>), where Slurm's client commands (sbatch, scontrol, scancel, squeue,
// sinfo) run too and where a test may start the job's own services (etcd). One munged (a generated
// key, its socket in <dir>/munge) authenticates every daemon and command: a Unix socket is reachable
// from every network namespace. slurm.conf (<dir>/slurm.conf, SLURM_CONF for the commands):
// SlurmUser=root, ProctrackType=proctrack/linuxproc, TaskPlugin=task/none, select/linear (whole
// nodes), no accounting, SlurmdParameters=config_overrides (the configured CPUs, not the machine's),
// ReturnToService=2 (a restarted slurmd brings its DOWN node back). Slurm's own ports (6817/6818)
// are fixed inside the private namespaces, which nobody else shares.
//
// Every daemon is started by pid in its own process group with PR_SET_PDEATHSIG=SIGKILL (slurmd
// daemonizes nothing with -D; the slurmstepd of a job does, so the destructor SIGKILLs every process
// left in every namespace), everything lives in a private temp directory, removed at the end unless
// `keep_dir`. Root only.
//
// Thread-safety: one thread owns a SlurmCluster; nothing here is safe to call concurrently.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "testing/netns.h"
#include "testing/process.h"

namespace edl::testing {

struct SlurmClusterOptions {
  int nodes = 3;                        // slurmd count (2..16): nodes n0..n<nodes-1>
  int cpus = 2;                         // CPUs= of every node
  std::vector<std::string> conf_lines;  // extra slurm.conf lines (e.g. partitions for preemption);
                                        // without a PartitionName line, one partition "edl" of every node
  bool keep_dir = false;                // keep the directory (configuration, daemon logs, job output)
};

class SlurmCluster {
 public:
  // "" when a cluster can run here, else why not: no root / network namespaces, or slurmctld,
  // slurmd, sbatch / scontrol (slurm-client) or munged not installed.
  static std::string unavailable();

  // Writes the key and the configuration, starts munged, slurmctld and every slurmd, and waits until
  // every node is idle. Throws std::runtime_error naming what failed (with the daemon's log tail);
  // whatever was started before is stopped and removed.
  explicit SlurmCluster(const SlurmClusterOptions& options);
  ~SlurmCluster();
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  int nodes() const { return options_.nodes; }
  static std::string node_name(int i) { return "n" + std::to_string(i); }
  std::string node_address(int i) const { return net_->address(i); }
  int controller_ns() const { return options_.nodes; }  // index of the controller's namespace in net()
  std::string controller_address() const { return net_->address(controller_ns()); }
  const NetnsCluster& net() const { return *net_; }
  const std::string& dir() const { return dir_; }
  std::string conf_path() const { return dir_ + "/slurm.conf"; }

  // Runs a Slurm client command in the controller's namespace with SLURM_CONF set and `env`
  // ("NAME=value") added to this process's environment.
  CommandResult slurm_command(const std::vector<std::string>& argv, const std::vector<std::string>& env = {}) const;
  // `sbatch --parsable ARGS`: the job id. Throws std::runtime_error with sbatch's output on failure.
  long submit(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) const;
  // The fields of `scontrol show job -o ID` (JobState, NodeList, ExitCode, ...); empty when unknown.
  std::map<std::string, std::string> job(long id) const;
  // A node's state as `sinfo` names it (idle, alloc, down*, ...); "" when it cannot be read.
  std::string node_state(int i) const;
  // Waits until every node is idle; false after timeout_ms.
  bool wait_idle(double timeout_ms) const;

  // --- faults ------------------------------------------------------------------------------------
  // The node is lost: its link is cut (peers see silence, as after a power loss), then slurmd, the
  // jobs' slurmstepd and every process of the jobs on it get SIGKILL. Returns the monotonic ms
  // (CLOCK_MONOTONIC, the clock of the commit log) right after the cut.
  double crash_node(int i);
  // `scontrol update nodename=n<i> state=STATE reason=REASON` (e.g. down, drain, resume).
  void set_node_state(int i, const std::string& state, const std::string& reason) const;
  // Heals a crashed node's link and starts its slurmd again (it registers and, with
  // ReturnToService=2, comes back from DOWN).
  void restart_node(int i);

 private:
  void write_config() const;
  void start_munge();
  pid_t spawn_daemon(int ns_index, const std::vector<std::string>& argv, const std::string& log);
  void start_slurmd(int i);
  std::string log_tail(const std::string& path) const;
  void teardown() noexcept;

  SlurmClusterOptions options_;
  std::unique_ptr<NetnsCluster> net_;
  std::string dir_;
  pid_t munged_ = -1, slurmctld_ = -1;
  std::vector<pid_t> slurmd_;
};

}  // namespace edl::testing
