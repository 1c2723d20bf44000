// CommitLog: the per-step commit log written by testing/multihost_worker and the control-plane
// measures computed from it (docs/multihost.md): pause around a fault, committed steps that were
// rolled back, split-brain steps, and when a side stopped.
//
// A commit is "worker W of host H committed step S in generation G with parameters CRC at monotonic
// time T" (CLOCK_MONOTONIC is one clock for every namespace of the machine, so times of different
// emulated hosts compare directly).
//
// The log of testing/elastic_worker (the synthetic worker of the elastic and Slurm scenarios) is read
// into the same terms by CommitLog::parse_elastic_worker: its `step` lines are commits (the host is
// the part of the worker id "HOST:SLOT.INCARNATION" before the ':'; crc 0: it logs its parameters
// only at the end), `done` lines are ends with the parameter CRC and the step-history hash, `gen`
// lines generations and `audit` lines its exactly-once data audit; exactly_once() checks them.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace edl::testing {

struct Commit {
  std::string worker, host;
  int64_t step = 0;
  uint64_t generation = 0;
  int rank = 0, size = 0;
  uint32_t crc = 0;
  double mono_ms = 0, wall_ms = 0;
};

struct WorkerEnd {  // a `done` or `error` line
  std::string worker, host;
  bool error = false;
  int64_t step = 0;      // done only
  uint32_t crc = 0;      // done only
  double mono_ms = 0;    // 0 in elastic_worker's log (its done and error lines carry no time)
  std::string message;   // error only
  int64_t hist = 0;      // elastic_worker's done only: the hash of the steps applied (reference_hist)
};

struct Generation {  // elastic_worker's `gen` line: a worker entered a generation
  std::string worker, host;
  uint64_t generation = 0;
  int rank = 0, size = 0, previous_size = 0;
  bool after_failure = false;  // formed after a failure (not a join or a graceful leave)
  double mono_ms = 0;
};

struct Audit {  // elastic_worker's `audit` line (--records): records trained exactly once
  std::string worker;
  uint64_t once = 0, records = 0;
};

struct CommitLog {
  std::vector<Commit> commits;  // in file order
  std::vector<WorkerEnd> ends;
  std::vector<Generation> generations;  // elastic_worker only
  std::vector<Audit> audits;            // elastic_worker only
  // Parses the lines of multihost_worker (others are ignored; a torn last line is skipped).
  static CommitLog parse(const std::string& text);
  // Parses the lines of testing/elastic_worker (see above; others and a torn last line are skipped).
  static CommitLog parse_elastic_worker(const std::string& text);
};

// elastic_worker's step-history hash after steps 1..n, each applied once (its `done` line's hist).
int64_t reference_hist(int64_t steps);

// Exactly-once training of an elastic_worker job: every worker of `finishers` (worker ids) logged
// `done` at one step with one parameter CRC and the history hash of that step, and an audit in which
// every one of `records` records was trained exactly once (records 0: no data audit); every other
// `done` line (a worker that left gracefully) holds the history hash of its own step. "" when all
// holds, else what did not.
std::string exactly_once(const CommitLog& log, const std::vector<std::string>& finishers, uint64_t records);

// The training pause around a fault: the longest gap between consecutive commits (of any worker)
// from the last commit at or before `fault_ms` up to `end_ms` (when the survivors have recovered).
// A stall that starts before the fault is detected shows as one long gap. -1 when there is no
// commit before the fault or none after it up to end_ms.
double pause_ms(const CommitLog& log, double fault_ms, double end_ms);

// Committed steps that were rolled back: distinct steps committed in one generation and committed
// again in a later generation (the later generation restarted below them).
int lost_steps(const CommitLog& log);

// Steps that show two generations training at once or members disagreeing: (a) commits of a
// generation made after a later generation had already committed a step, and (b) steps for which
// two members of the same generation logged different parameter CRCs. Counted as distinct
// (generation, step) pairs; 0 means no split brain.
int split_brain_steps(const CommitLog& log);

// Highest step committed by any worker of `host` after `after_ms`; -1 when none.
int64_t last_step_of_host(const CommitLog& log, const std::string& host, double after_ms);
// Number of commits after `after_ms` by workers not on `host` ("" = any host).
int commits_after(const CommitLog& log, double after_ms, const std::string& except_host = "");
// First `error` line of a worker of `host` after `after_ms`; nullptr when none.
const WorkerEnd* first_error_of_host(const CommitLog& log, const std::string& host, double after_ms);

}  // namespace edl::testing
