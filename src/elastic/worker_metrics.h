// WorkerMetrics: this process's counters for edl-run's metrics (docs/observability.md, "Metrics").
//
// The training thread and the runtime update counters through the hooks below (each takes one
// uncontended mutex for a few additions; none does I/O). When EDL_METRICS_ADDR is set, start()
// starts a reporter thread that sends a WorkerReport datagram (src/elastic/metrics_report.h) to
// edl-run every EDL_METRICS_INTERVAL_MS and at once after a phase change or the first commit (edl-run's
// crash-loop rule asks whether a worker committed), with MSG_DONTWAIT: the training thread never
// waits for edl-run, and a full socket only drops a report.
//
// One instance per process (instance()); tests running ranks as threads share it, which only mixes
// their counters. allreduce bytes and time are read from the current generation's engine by the
// reporter thread (Engine::stats(), summed across generations).
// Thread-safety: every method from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/config.h"
#include "edl/export.h"
#include "elastic/metrics_report.h"

namespace edl::metrics {

class EDL_API WorkerMetrics {  // exported for tests (tests/elastic/api_test.cc)
 public:
  static WorkerMetrics& instance();
  ~WorkerMetrics();

  // Starts the reporter when config.metrics_addr is set (idempotent); the worker id is config.worker_id.
  void start(const Config& config);
  // Sends a last report (phase done) and stops the reporter. Idempotent.
  void stop();

  // --- hooks ---------------------------------------------------------------------------------
  void set_phase(Phase p);
  Phase phase() const;
  void set_generation(uint64_t generation, int rank, int size);
  // A batch boundary at State::step `step` (after the increment).
  void batch_end(int64_t step);
  // The state was committed at the current step: its samples cannot be lost any more.
  void committed();
  // A failure rolled the state back by `steps` steps (to the last commit).
  void rolled_back(int64_t steps, int64_t step_now);
  // A recovery finished: training resumes in `generation` after `seconds`.
  void recovered(uint64_t generation, double seconds, int64_t steps_replayed);
  void store_op(double seconds);
  // Samples each batch of this worker counts (edl::set_samples_per_batch); 0 or never set: 1.
  void set_samples_per_batch(int64_t n);

  // The report as it would be sent now (tests; the reporter).
  WorkerReport snapshot();

 private:
  WorkerMetrics() = default;
  void loop(std::string addr, std::chrono::milliseconds interval);
  void add_engine_stats(WorkerReport* r);
  void account_phase_locked(std::chrono::steady_clock::time_point now);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  WorkerReport r_;
  Phase phase_ = Phase::kStarting;
  std::chrono::steady_clock::time_point phase_since_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_batch_{};
  uint64_t wait_ns_at_batch_ = 0;
  int64_t samples_per_batch_ = 1;
  uint64_t samples_progress_ = 0;  // samples up to the current state step (rolled back with it)
  bool send_now_ = false;
  bool stop_ = false;
  // Engine statistics: totals of the engines already replaced, and the current one.
  std::weak_ptr<void> engine_;
  uint64_t engine_bytes_base_ = 0, engine_bytes_last_ = 0;
  double engine_us_base_ = 0, engine_us_last_ = 0;
  std::thread thread_;
};

}  // namespace edl::metrics
