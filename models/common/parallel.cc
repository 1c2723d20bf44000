#include "models/common/parallel.h"

#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define EDL_CPU_RELAX() _mm_pause()
#else
#define EDL_CPU_RELAX() std::this_thread::yield()
#endif

namespace edl::models {
namespace {

// Spin this many pause iterations before blocking (tens of microseconds up to ~0.2 ms, depending on
// the CPU's pause latency): long enough to catch the next parallel region on a quiet machine, short
// enough not to steal a shared core from the thread that is still working for long (libgomp's default
// spin made 2 threads 3-4x slower than 1 under contention; OMP_WAIT_POLICY=passive fixed it there).
constexpr int kSpinIterations = 4000;

// A process-wide pool of worker threads; the caller runs chunk 0 itself. One region at a time:
// concurrent callers are serialised. Workers are joined at process exit.
class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      generation_.fetch_add(1);
    }
    start_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  void run(int threads, int n, const std::function<void(int, int, int)>& fn) {
    std::lock_guard<std::mutex> region(region_mu_);
    grow(threads - 1);
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn_ = &fn;
      n_ = n;
      threads_ = threads;
      error_ = nullptr;
      remaining_.store(threads - 1);
      generation_.fetch_add(1);
    }
    start_.notify_all();
    run_chunk(fn, n, threads, 0);
    for (int i = 0; i < kSpinIterations && remaining_.load(std::memory_order_acquire) != 0; ++i) EDL_CPU_RELAX();
    if (remaining_.load(std::memory_order_acquire) != 0) {
      std::unique_lock<std::mutex> lock(mu_);
      done_.wait(lock, [&] { return remaining_.load(std::memory_order_acquire) == 0; });
    }
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void grow(int workers) {
    while (static_cast<int>(workers_.size()) < workers) {
      int tid = static_cast<int>(workers_.size()) + 1;
      uint64_t seen = generation_.load();
      workers_.emplace_back([this, tid, seen] { loop(tid, seen); });
    }
  }

  void run_chunk(const std::function<void(int, int, int)>& fn, int n, int threads, int tid) {
    const int begin = static_cast<int>(static_cast<long>(n) * tid / threads);
    const int end = static_cast<int>(static_cast<long>(n) * (tid + 1) / threads);
    if (begin >= end) return;
    try {
      fn(tid, begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
  }

  void loop(int tid, uint64_t seen) {
    for (;;) {
      for (int i = 0; i < kSpinIterations && generation_.load(std::memory_order_acquire) == seen; ++i) {
        EDL_CPU_RELAX();
      }
      const std::function<void(int, int, int)>* fn;
      int n, threads;
      {
        std::unique_lock<std::mutex> lock(mu_);
        start_.wait(lock, [&] { return generation_.load() != seen; });
        if (stop_) return;
        seen = generation_.load();
        fn = fn_;
        n = n_;
        threads = threads_;
      }
      if (tid < threads) {
        run_chunk(*fn, n, threads, tid);
        if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
          std::lock_guard<std::mutex> lock(mu_);
          done_.notify_one();
        }
      }
    }
  }

  std::mutex region_mu_;  // one region at a time
  std::mutex mu_;  // guards the region fields below and the condition variables
  std::condition_variable start_, done_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> remaining_{0};
  std::vector<std::thread> workers_;
  const std::function<void(int, int, int)>* fn_ = nullptr;
  int n_ = 0, threads_ = 1;
  std::exception_ptr error_;
  bool stop_ = false;
};

Pool& pool() {
  static Pool p;
  return p;
}

}  // namespace

void run_chunks(int threads, int n, const std::function<void(int, int, int)>& fn) {
  if (n <= 0) return;
  int t = clamp_threads(threads, n);
  if (t == 1) {
    fn(0, 0, n);
    return;
  }
  pool().run(t, n, fn);
}

}  // namespace edl::models
