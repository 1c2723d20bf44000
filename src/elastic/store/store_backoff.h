// Backoff: the pause schedule of a store client redialling a lost connection — exponential from
// 10 ms, doubling up to 1 s, each pause jittered by +-25% so that many workers that lost the store
// at the same moment do not redial in lockstep. Bounded by the caller's deadline
// (StoreOptions::reconnect_timeout, docs/store.md "Reconnect").
// Thread-safety: one Backoff per reconnect attempt sequence, used by one thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <random>

namespace edl::store {

class Backoff {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Backoff(Clock::time_point deadline)
      : deadline_(deadline), rng_(static_cast<unsigned>(Clock::now().time_since_epoch().count())) {}

  bool expired() const { return Clock::now() >= deadline_; }
  Clock::time_point deadline() const { return deadline_; }
  // The moment to try again: now + the next jittered pause, never past the deadline.
  Clock::time_point next() {
    auto pause = std::chrono::microseconds(static_cast<int64_t>(pause_.count() * 1000 * (0.75 + 0.5 * unit_(rng_))));
    pause_ = std::min(pause_ * 2, std::chrono::milliseconds(1000));
    return std::min(Clock::now() + pause, deadline_);
  }

 private:
  Clock::time_point deadline_;
  std::chrono::milliseconds pause_{10};
  std::minstd_rand rng_;
  std::uniform_real_distribution<double> unit_{0.0, 1.0};
};

}  // namespace edl::store
