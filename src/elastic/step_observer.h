// StepObserver: what a worker measures about its own steps at batch boundaries, for the two
// observability rules of docs/observability.md:
//   - "Stragglers": the compute part of each step (time between two boundaries minus the time the
//     training thread was blocked in collectives, collective/wait_time.h), contributed to the
//     batch-boundary agreement; the gathered vector goes through the StragglerDetector.
//   - "Autoscaling": rank 0's throughput window of the current generation (steps and seconds from
//     its first boundary), published to <job>/throughput for edl-run at most every 250 ms.
// Thread-safety: the training thread calls everything except stats(), which any thread may call.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "edl/export.h"
#include "elastic/straggler.h"

namespace edl::elastic {

class EDL_API StepObserver {
 public:
  explicit StepObserver(StragglerOptions o) : detector_(o) {}

  // A new generation of `size` members: compute times and straggler runs start over.
  void new_generation(int size);
  // At a batch boundary: the compute part of the step that just ended, in microseconds (>= 1), or
  // 0 at the first boundary of a generation (unknown).
  int64_t measure_compute_us();
  // Time the training thread spent at a boundary on something that is not its compute (a stop-free
  // newcomer receiving state): left out of the next step's compute time.
  void add_waited(std::chrono::steady_clock::duration d) {
    last_blocked_ns_ -= static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
  }

  struct Verdict {
    std::vector<StragglerReport> reports;  // ranks that became stragglers at this boundary
    std::vector<int> evict;                // ranks to remove now (empty unless options().evict)
  };
  // The gathered compute times (microseconds, by rank) of one boundary; identical on every member.
  Verdict observe(int64_t step, const std::vector<int64_t>& compute_us, int min_np);

  // Rank 0: the value to write to <job>/throughput now, if one is due:
  // "<gen> <size> <steps> <seconds> <local batch>" (steps counted from the generation's first boundary).
  std::optional<std::string> throughput_sample(uint64_t gen, int size, int64_t local_batch);

  const StragglerOptions& options() const { return detector_.options(); }
  StragglerStats stats() const;

 private:
  using Clock = std::chrono::steady_clock;
  StragglerDetector detector_;
  bool have_boundary_ = false;
  Clock::time_point last_boundary_{};
  uint64_t last_blocked_ns_ = 0;
  bool evict_decided_ = false;  // an eviction of this generation was counted
  int64_t window_steps_ = -1;  // boundaries since the first of the generation (-1: none yet)
  Clock::time_point window_start_{}, last_publish_{};
  mutable std::mutex mu_;      // guards stats_
  StragglerStats stats_;
};

}  // namespace edl::elastic
