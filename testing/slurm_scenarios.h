// EDL jobs on a real Slurm cluster (testing/slurm_cluster.h; docs/launcher.md, "Slurm"): each
// scenario builds a 3-node SlurmCluster, starts the job's etcd on the controller host, submits the
// user's batch script examples/slurm/edl-job.sbatch (one edl-run per node, each its own step, the
// discovery script edl-slurm-hosts) with the synthetic worker testing/elastic_worker training on
// --records data, injects its event through Slurm, and checks what must hold. Shared by tests/slurm
// (which check `ok`, never the times) and bench/slurm_bench (which reports the times).
//
//   train      a 3-node allocation trains to the end of the data
//   node_loss  n2 is lost (link cut, SIGKILL of slurmd and every process on it, then
//              `scontrol update nodename=n2 state=down`): the allocation lives on (--no-kill), the
//              workers of n0 and n1 go on in place (the same processes) in a generation of 2
//   scale_up   a 2-node allocation trains; a second `sbatch` of the same script with the same
//              --job-id and --store gets n2, and its worker joins at a batch boundary (a generation
//              of 3 formed without a failure)
//   leave      as scale_up, then `scancel --signal=TERM` of the second allocation's step: its worker
//              leaves gracefully at a batch boundary (it logs `done`, the next generation is not
//              after a failure), the others go on
//   preempt    as scale_up, with a "serve" partition of a higher PriorityTier over the same nodes
//              (preempt/partition_prio, PreemptMode=CANCEL, GraceTime=30 on "train"): a serving job
//              that needs n2 preempts the second allocation; its worker leaves gracefully on the
//              SIGTERM, the allocation ends (its batch script exits 143 within GraceTime), the
//              serving job runs, the others go on
//   drain      `scontrol update nodename=n2 state=drain`: the discovery script drops n2, its worker
//              leaves gracefully, the others go on; after `state=resume` n2's edl-run starts a new
//              worker that joins at a batch boundary
// Every scenario checks exactly-once training of the finishing workers (commit_log.h's
// exactly_once: one step, one parameter CRC, every step applied once, every record trained once),
// no committed step rolled back (lost_steps) and no split brain, and that every batch script exits
// as the scenario expects (0 for an allocation that trained to the end).
//
// Thread-safety: run_slurm_scenario is blocking and uses process-wide namespace state: one at a time.
#pragma once

#include <string>
#include <vector>

namespace edl::testing {

struct SlurmScenarioOptions {
  std::string edl_run, worker;  // paths of edl-run and testing/elastic_worker (required)
  std::string scripts;          // the directory of edl-job.sbatch, edl-node.sh, edl-slurm-hosts (required)
  bool keep_dir = false;        // keep the cluster's directory (logs, job output; path in the result)
  int lease_ms = 3000;          // EDL_LEASE_MS of the job (heartbeat = lease / 6)
  double step_ms = 30;          // elastic_worker --step-ms
};

struct SlurmScenarioResult {
  std::string scenario;
  int nodes = 3;
  bool ok = false;
  std::string detail;          // what failed, or a summary
  std::string dir;             // the cluster's directory (removed unless keep_dir)
  int lost_steps = 0;          // committed steps rolled back (commit_log.h)
  int split_brain_steps = 0;
  int final_size = 0;          // world size of the last step
  double loss_to_step_ms = -1;   // node_loss: the crash to the first step of the next generation
  double alloc_to_step_ms = -1;  // scale_up, leave: the second allocation's batch script starting to
                                 // its worker's first step
  double submit_to_step_ms = -1; // scale_up, leave: its `sbatch` to that step (Slurm's scheduling too)
  double leave_to_step_ms = -1;  // leave, preempt: the scancel / the serving job's sbatch to the first
                                 // step of the generation without the second allocation
};

const std::vector<std::string>& slurm_scenario_names();
// "" when the scenarios can run here, else why not (SlurmCluster::unavailable(), etcd missing, or a
// build without the etcd:// store).
std::string slurm_scenarios_unavailable();
// Runs one scenario; failures of the job are in the result (ok = false, detail), harness failures
// (namespaces, daemons that do not start) throw std::runtime_error.
SlurmScenarioResult run_slurm_scenario(const std::string& scenario, const SlurmScenarioOptions& options);

}  // namespace edl::testing
