// BucketReducer: the DistributedOptimizer's communication thread. It sums flat float32 buckets over
// a Communicator in the order they were launched, optionally as float16 on the wire.
//
// Lifetime: one reducer per Communicator (a generation); the optimizer replaces it when the
// communicator changes. The destructor finishes the jobs already queued (each bounded by the
// communicator's deadline) and joins the thread.
// Thread-safety: launch()/wait() from the training thread; the jobs' buffers belong to the reducer
// from launch() until wait() returns.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "edl/communicator.h"

namespace edl::optim::detail {

struct ReduceJob {
  float* data = nullptr;
  size_t count = 0;
  // fp16 on the wire: data * prescale is converted into `half` (count elements), summed, and
  // converted back into data. nullptr: data is summed in float32.
  uint16_t* half = nullptr;
  float prescale = 1.0f;
  // Filled by the reducer.
  bool done = false;
  std::exception_ptr error;
  double busy_s = 0;
};

class BucketReducer {
 public:
  explicit BucketReducer(std::shared_ptr<Communicator> comm);
  ~BucketReducer();
  BucketReducer(const BucketReducer&) = delete;
  BucketReducer& operator=(const BucketReducer&) = delete;

  const std::shared_ptr<Communicator>& comm() const { return comm_; }
  // Queues job (reset by the caller: done = false, error = null).
  void launch(ReduceJob* job);
  // Blocks until job is done (successfully or not).
  void wait(ReduceJob* job);

 private:
  void loop();
  void run(ReduceJob* job);

  std::shared_ptr<Communicator> comm_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<ReduceJob*> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace edl::optim::detail
