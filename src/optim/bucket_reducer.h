// Reducers: how the DistributedOptimizer sums its flat float32 buckets over the ranks, in launch
// order, optionally as float16 on the wire.
//   BucketReducer  owns a communication thread that runs blocking allreduces on a Communicator the
//                  optimizer was given (thread-as-rank worlds, or any group the caller manages).
//   EngineReducer  hands each bucket to a generation's collective::Engine as a named asynchronous
//                  allreduce (the process-global world: the engine's thread owns that communicator).
//
// Lifetime: one reducer per generation; the optimizer replaces it when the communicator changes.
// The destructor finishes the jobs already launched (each bounded by the communicator's deadline).
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
#include <string>
#include <thread>

#include "edl/collectives.h"
#include "edl/communicator.h"

namespace edl::collective {
class Engine;
}

namespace edl::optim::detail {

struct ReduceJob {
  float* data = nullptr;
  size_t count = 0;
  // fp16 on the wire: data * prescale is converted into `half` (count elements), summed, and
  // converted back into data. nullptr: data is summed in float32.
  uint16_t* half = nullptr;
  float prescale = 1.0f;
  // Another buffer and reduction instead (the reproducible mode's max and int64 sum): `other` holds
  // `count` elements of `type`, reduced with `op`; data and half are unused.
  void* other = nullptr;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  std::string name;  // request name (EngineReducer): identical on every rank
  // Filled by the reducer.
  Handle handle;
  bool done = false;
  std::exception_ptr error;
  double busy_s = 0;
  double launch_s = 0;  // steady-clock seconds: BucketReducer::launch() (timeline)
  double start_s = 0;  // steady-clock seconds: when the reduction started / finished
  double end_s = 0;
};

class Reducer {
 public:
  virtual ~Reducer() = default;
  // Starts summing job (reset by the caller: done = false, error = null).
  virtual void launch(ReduceJob* job) = 0;
  // Blocks until job is done (successfully or not; the error is left in job->error).
  virtual void wait(ReduceJob* job) = 0;
};

class BucketReducer final : public Reducer {
 public:
  explicit BucketReducer(std::shared_ptr<Communicator> comm);
  ~BucketReducer() override;
  BucketReducer(const BucketReducer&) = delete;
  BucketReducer& operator=(const BucketReducer&) = delete;

  void launch(ReduceJob* job) override;
  void wait(ReduceJob* job) override;

 private:
  void loop();
  void run(ReduceJob* job);
  void trace(const ReduceJob& job) const;  // timeline events of a finished job

  std::shared_ptr<Communicator> comm_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<ReduceJob*> queue_;
  bool stop_ = false;
  std::thread thread_;
};

// Float16 helpers shared by the reducers.
void to_half(const float* in, float scale, uint16_t* out, size_t n);
void from_half(const uint16_t* in, float* out, size_t n);

class EngineReducer final : public Reducer {
 public:
  explicit EngineReducer(std::shared_ptr<collective::Engine> engine);
  ~EngineReducer() override = default;

  void launch(ReduceJob* job) override;
  void wait(ReduceJob* job) override;

 private:
  std::shared_ptr<collective::Engine> engine_;
};

}  // namespace edl::optim::detail
