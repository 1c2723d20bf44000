// JobMetrics: edl-run's view of the job's progress, built from its workers' reports (WorkerReport,
// src/elastic/metrics_report.h) and its own events (starts, exits, failures, restarts, generations).
// It keeps what the Prometheus endpoint, the CSV file and the goodput report show
// (docs/observability.md): counters, the job's phase over time, the throughput per world size.
//
// The job's phase at a moment is the "worst" phase among the live local workers of the newest
// generation any of them reports (recovery > rendezvous/starting > sync > training > done), so
// one worker still recovering means the job is not training. Time is integrated piecewise: the
// phase and world size hold from one event or report to the next, so the split into training /
// rendezvous / sync / recovery is as fine as EDL_METRICS_INTERVAL_MS (reports also come at once on
// every phase change).
//
// Every method takes `now` so that tests can drive time. Thread-safety: every method from any
// thread (one mutex).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "elastic/metrics_report.h"

namespace edl::launcher {

using MetricsClock = std::chrono::steady_clock;

// Per-worker gauges (live workers only).
struct WorkerGauges {
  std::string worker_id;
  metrics::Phase phase = metrics::Phase::kStarting;
  uint64_t generation = 0;
  int rank = -1;
  int64_t step = 0;
  double step_seconds = 0;     // mean step time over its last report interval (0 = none yet)
  double compute_seconds = 0;  // the compute part of it (step time minus waiting for collectives)
  uint64_t steps = 0;
  uint64_t samples = 0;
};

// Throughput of the job at one world size, measured while the job phase was training.
struct SizeThroughput {
  double seconds = 0;       // training time at this size
  double steps = 0;         // job steps in it
  double samples = 0;       // samples (this host's workers) in it
  double wall_seconds = 0;  // all time at this size once training had started (goodput's baseline)
};

struct JobSnapshot {
  double uptime_seconds = 0;
  int world_size = 0;                 // members of the newest generation (0 = none yet)
  uint64_t generation = 0;
  metrics::Phase phase = metrics::Phase::kStarting;
  uint64_t restarts = 0, failures = 0, joins = 0, leaves = 0;
  std::vector<double> recovery_seconds;  // one per recovery (newest generation last)
  double steps_replayed = 0;
  double steps_total = 0;             // job steps (every member runs each step once), replays included
  double samples_total = 0;           // samples of this host's workers, replays included
  double samples_committed = 0;       // samples of committed steps of this host's workers
  double steps_per_second = 0;        // over the last few seconds
  double samples_per_second = 0;
  double allreduce_bytes = 0, allreduce_seconds = 0;
  double store_ops = 0, store_op_seconds = 0;
  double phase_seconds[metrics::kPhases] = {};  // job time in each phase
  double mean_world_size = 0;         // time-weighted over the time a generation existed
  int min_world_size = 0, max_world_size = 0;
  std::map<int, SizeThroughput> per_size;
  int workers_reporting = 0;
  std::vector<WorkerGauges> workers;
  // Goodput (docs/observability.md, "Goodput report").
  double goodput_samples_per_second = 0;  // committed samples / uptime
  std::optional<double> goodput_ratio;    // committed samples / the same world sizes without failures
  double effective_training_ratio = 0;    // training time / uptime
  // Stragglers and autoscaling (docs/observability.md): fed by edl-run's observation loop.
  uint64_t straggler_reports = 0;         // straggler reports edl-run logged
  int recommended_world_size = 0;         // the autoscaler's latest recommendation (0 = none yet)
  std::optional<double> scaling_efficiency;  // the s_{k,d} behind it (none = not measured)
};

class JobMetrics {
 public:
  explicit JobMetrics(MetricsClock::time_point start);

  void on_report(const metrics::WorkerReport& r, MetricsClock::time_point now);
  void on_worker_started(const std::string& worker_id, MetricsClock::time_point now);
  void on_worker_exit(const std::string& worker_id, MetricsClock::time_point now);
  // A worker failed. When it was a member of the newest generation and `recovers` (the job goes on),
  // the job is recovering from `now` until it trains again in a newer generation.
  void on_failure(const std::string& worker_id, bool recovers, MetricsClock::time_point now);
  void on_restart(MetricsClock::time_point now);
  void on_generation(uint64_t gen, const std::vector<std::string>& members, MetricsClock::time_point now);
  // A straggler report was logged; the autoscaler decided (efficiency < 0: not measured).
  void on_straggler_report();
  void on_advice(int recommended_world_size, double efficiency);

  JobSnapshot snapshot(MetricsClock::time_point now);

  // Whether the worker reported a committed step (samples_committed > 0) at any time: edl-run's
  // crash-loop rule counts only failures of workers that did not.
  bool committed_progress(const std::string& worker_id) const;

  // Length of the window of steps_per_second / samples_per_second.
  static constexpr double kRateWindowSeconds = 3.0;

 private:
  struct Worker {
    metrics::WorkerReport last;
    bool reported = false;
    bool live = true;
    double step_seconds = 0, compute_seconds = 0;
  };
  struct Recovery {
    double seconds = 0;
    int64_t steps_replayed = 0;
  };
  void integrate(MetricsClock::time_point now);
  metrics::Phase job_phase() const;
  metrics::Phase workers_phase(uint64_t* newest) const;
  double steps_divisor(const metrics::WorkerReport& r) const;
  void record_rates(MetricsClock::time_point now);
  void fill_goodput(JobSnapshot* s) const;

  mutable std::mutex mu_;
  const MetricsClock::time_point start_;
  MetricsClock::time_point last_;
  std::map<std::string, Worker> workers_;
  std::map<uint64_t, Recovery> recoveries_;  // by the generation training resumed in
  std::set<std::string> members_;
  bool have_generation_ = false;
  bool trained_ = false;                     // the job phase was training at some point
  metrics::Phase last_phase_ = metrics::Phase::kStarting;  // the job phase of the last integration
  std::optional<MetricsClock::time_point> failed_at_;      // a member failed; the job has not trained since
  uint64_t failed_gen_ = 0;                                  // the newest generation at that moment
  JobSnapshot totals_;                       // the counters and time integrals (the rest is filled in snapshot)
  double size_seconds_ = 0, sized_seconds_ = 0;
  std::deque<std::pair<MetricsClock::time_point, std::pair<double, double>>> history_;  // steps, samples
};

}  // namespace edl::launcher
