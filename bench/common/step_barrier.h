// StepBarrier: a reusable barrier for ranks run as threads, so that benches whose ranks do not
// communicate (compute-only rows, one process of thread ranks) still end each step together, as
// an allreduce would make them. std::barrier is C++20; this is the C++17 one.
//
// Thread-safety: arrive_and_wait() from the n participating threads, once per step each.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace edl::bench {

class StepBarrier {
 public:
  explicit StepBarrier(int n) : n_(n) {}
  // Blocks until all n threads have arrived in this step.
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t gen = gen_;
    if (++count_ == n_) {
      count_ = 0;
      ++gen_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return gen_ != gen; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_;
  int count_ = 0;
  uint64_t gen_ = 0;
};

}  // namespace edl::bench
