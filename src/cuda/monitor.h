// Monitor: the failure state and the watchdog of one generation's device side (docs/gpu.md,
// "Failure handling").
//
// A generation's CudaBackend hands every enqueued collective's completion (an event recorded on its
// stream after the work) to the Monitor. The watchdog thread polls what is outstanding: a finished
// event releases the references the request asked to hold; an unfinished one past the collective
// deadline fails the generation with TimeoutError; and the backend's probe (the host communicator
// poisoned? an NCCL asynchronous error?) runs every poll while work is outstanding. fail() records
// the first error and runs the backend's teardown (revoke / abort of the NCCL communicator,
// poisoning the host communicator) on the failing thread, outside every lock of the Monitor.
// Completions outlive the backend: they keep the Monitor and the event pool alive.
//
// A completion whose event finished before the generation failed stays successful; one still
// pending when it failed throws the failure. References held for a request are released only once
// its event finished (a revoked or aborted NCCL kernel ends, so the event does too): device memory
// is never handed back while a kernel may still use it.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collective/handle.h"
#include "cuda/cuda_util.h"

namespace edl::cuda {

class Monitor;
using Clock = std::chrono::steady_clock;

class CudaCompletion : public detail::DeviceCompletion {
 public:
  CudaCompletion(std::shared_ptr<Monitor> monitor, std::shared_ptr<EventPool> pool, cudaEvent_t event,
                 Clock::time_point deadline, std::string what, std::vector<std::shared_ptr<void>> holds);
  ~CudaCompletion() override;
  bool query() override;
  void wait() override;
  cudaEvent_t event() const { return event_; }
  // Polls the event once: true when the completion is over (finished, or failed with its event done).
  bool observe();
  bool succeeded() const { return state_.load() == kDone; }
  Clock::time_point deadline() const { return deadline_; }
  const std::string& what() const { return what_; }

 private:
  enum : int { kPending = 0, kDone = 1, kFailed = 2 };
  std::shared_ptr<Monitor> monitor_;
  std::shared_ptr<EventPool> pool_;
  cudaEvent_t event_;
  Clock::time_point deadline_;
  std::string what_;
  std::atomic<int> state_{kPending};
  std::mutex mu_;
  std::vector<std::shared_ptr<void>> holds_;
};

class Monitor : public std::enable_shared_from_this<Monitor> {
 public:
  // generation: for messages; device: the watchdog thread's current device.
  Monitor(uint64_t generation, int device);
  ~Monitor();
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  // The backend's hooks: teardown(reason) runs once, on the thread whose fail() came first; probe()
  // returns an error (or null) and runs on the watchdog thread while work is outstanding.
  void set_hooks(std::function<void(const std::string&)> teardown, std::function<std::exception_ptr()> probe);
  // Stops the watchdog, drops the hooks (waits for a teardown in progress) and forgets what it
  // tracked. The backend calls it before it destroys what the hooks use.
  void stop();

  bool failed() const { return failed_.load(); }
  [[noreturn]] void rethrow() const;
  void throw_if_failed() const;
  // Records e as the generation's failure (first call wins) and runs the teardown.
  void fail(std::exception_ptr e);
  // Fails the generation with TimeoutError for `what` past its deadline.
  void fail_deadline(const std::string& what);
  uint64_t generation() const { return generation_; }

  // Watches c until it is over.
  void track(const std::shared_ptr<CudaCompletion>& c);
  // Polls everything outstanding once; true when nothing is outstanding any more.
  bool poll_outstanding();

 private:
  void loop();

  const uint64_t generation_;
  const int device_;
  std::atomic<bool> failed_{false};
  mutable std::mutex mu_;  // error_, outstanding_, stop_
  std::condition_variable cv_;
  std::exception_ptr error_;
  std::vector<std::shared_ptr<CudaCompletion>> outstanding_;
  bool stop_ = false;
  std::mutex hook_mu_;  // held while a hook runs
  std::function<void(const std::string&)> teardown_;
  std::function<std::exception_ptr()> probe_;
  std::thread thread_;
};

// "<what>" of an exception_ptr ("" for null).
std::string describe(std::exception_ptr e);

}  // namespace edl::cuda
