// One chaos_bench trial: draws a fault schedule from the trial's seed, runs the job (ChaosJob),
// injects the faults as training reaches their steps, then audits the result (exit status,
// identical final hashes, exactly-once counters) and measures recovery after every kill. With
// mtbf_s > 0 the schedule is instead a kill -9 of a random member at exponential intervals.
// The fault kinds and phases are described in chaos_bench.cc.
//
// Thread-safety: run_trial is called from one thread at a time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chaos_job.h"

namespace edl::bench::chaos {

struct TrialConfig {
  JobConfig job;                    // edl_run, worker, store, np, max_np (dir and job_id per trial)
  std::vector<std::string> kinds;   // fault kinds to draw from
  std::vector<std::string> phases;  // phases of the `kill` kind
  uint64_t seed = 1;
  int trial = 0;
  int max_faults = 3;               // 1..max_faults faults per trial
  uint64_t records = 480, batch = 4, records_per_shard = 20;
  int epochs = 3, step_ms = 10, params = 4096, flood_mib = 16;
  int timeout_s = 90;               // wall-time bound of a trial (a hang otherwise)
  double mtbf_s = 0;                // > 0: MTBF mode (kills at exponential intervals), no drawn faults
  bool keep = false;                // keep the work directory of an ok trial
  bool negative_control = false;    // chaos_worker --negative-control: the audit must fail
  // Reproducible mode (chaos_worker --deterministic --micro-batches K): the final state must also
  // equal that of the same job run by one worker without edl-run and without faults.
  bool deterministic = false;
  int micro_batches = 4;
};

struct Fault {
  std::string kind, phase;  // phase: the kill's phase ("" for other kinds)
  int64_t at_step = 0;      // injected once training reached this step
  int rank = -1;            // the targeted rank (-1: none)
  bool injected = false;
  std::string note;         // e.g. "untriggered", "join instead of leave"
  std::string label() const;
};

struct TrialResult {
  bool ok = false, params_identical = false, exactly_once = false, timed_out = false;
  bool matches_reference = false;   // reproducible mode: final hash == the 1-worker, fault-free run's
  int exit_status = -1, final_workers = 0;
  double wall_s = 0;
  int64_t lost_steps = 0;
  std::vector<Fault> faults;
  std::vector<double> recovery_ms;  // per kill
  int64_t final_step = 0;           // the step of the final state
  std::string final_hash;           // "<step> <params fnv64> <counts fnv64>" of the final state
  double span_s = 0, steps_per_s = 0;  // first to last trained step (MTBF mode)
  std::string error;
};

TrialResult run_trial(const TrialConfig& cfg);

}  // namespace edl::bench::chaos
