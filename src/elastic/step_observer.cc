// StepObserver (step_observer.h): compute-time measurement, straggler verdicts, throughput window.
#include "elastic/step_observer.h"

#include <algorithm>
#include <cstdio>

#include "collective/wait_time.h"

namespace edl::elastic {

void StepObserver::new_generation(int size) {
  detector_.reset(size);
  have_boundary_ = false;
  evict_decided_ = false;
  window_steps_ = -1;
}

int64_t StepObserver::measure_compute_us() {
  const auto now = Clock::now();
  const uint64_t blocked = collective::thread_blocked_ns();
  int64_t us = 0;
  if (have_boundary_) {
    const int64_t interval_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now - last_boundary_).count();
    const int64_t waited_ns = static_cast<int64_t>(blocked - last_blocked_ns_);
    us = std::max<int64_t>((interval_ns - waited_ns) / 1000, 1);
  }
  have_boundary_ = true;
  last_boundary_ = now;
  last_blocked_ns_ = blocked;
  return us;
}

StepObserver::Verdict StepObserver::observe(int64_t step, const std::vector<int64_t>& compute_us, int min_np) {
  std::vector<double> s(compute_us.size());
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<double>(compute_us[i]) / 1e6;
  Verdict v;
  v.reports = detector_.observe(step, s);
  v.evict = detector_.to_evict(min_np);
  std::vector<double> known;
  for (double t : s)
    if (t > 0) known.push_back(t);
  std::lock_guard<std::mutex> lock(mu_);
  stats_.step_s = s;
  stats_.median_s = StragglerDetector::median(known);
  if (!v.reports.empty()) {
    stats_.reports += v.reports.size();
    stats_.last = v.reports;
  }
  if (!v.evict.empty() && !evict_decided_) {
    stats_.evictions += v.evict.size();
    evict_decided_ = true;
  }
  return v;
}

std::optional<std::string> StepObserver::throughput_sample(uint64_t gen, int size, int64_t local_batch) {
  const auto now = Clock::now();
  if (window_steps_ < 0) {  // the first boundary of the generation opens the window (skips sync/warm-up)
    window_steps_ = 0;
    window_start_ = last_publish_ = now;
    return std::nullopt;
  }
  ++window_steps_;
  if (now - last_publish_ < std::chrono::milliseconds(250)) return std::nullopt;
  last_publish_ = now;
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%llu %d %lld %.6f %lld", static_cast<unsigned long long>(gen), size,
                static_cast<long long>(window_steps_), std::chrono::duration<double>(now - window_start_).count(),
                static_cast<long long>(local_batch));
  return std::string(buf);
}

StragglerStats StepObserver::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace edl::elastic
