#include "optim/bucket_reducer.h"

#include <chrono>

#include "edl/error.h"
#include "edl/types.h"

namespace edl::optim::detail {

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

BucketReducer::BucketReducer(std::shared_ptr<Communicator> comm) : comm_(std::move(comm)) {
  EDL_ASSERT(comm_ != nullptr);
  thread_ = std::thread([this] { loop(); });
}

BucketReducer::~BucketReducer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

void BucketReducer::launch(ReduceJob* job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(job);
  }
  work_cv_.notify_one();
}

void BucketReducer::wait(ReduceJob* job) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [job] { return job->done; });
}

void BucketReducer::loop() {
  for (;;) {
    ReduceJob* job = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and nothing left
      job = queue_.front();
      queue_.pop_front();
    }
    run(job);
    {
      std::lock_guard<std::mutex> lock(mu_);
      job->done = true;
    }
    done_cv_.notify_all();
  }
}

void BucketReducer::run(ReduceJob* job) {
  double t0 = now_s();
  try {
    if (job->half != nullptr) {
      const float scale = job->prescale;
      for (size_t i = 0; i < job->count; ++i) job->half[i] = float_to_half(job->data[i] * scale);
      comm_->allreduce(job->half, job->count, DataType::kFloat16, ReduceOp::kSum);
      for (size_t i = 0; i < job->count; ++i) job->data[i] = half_to_float(job->half[i]);
    } else {
      comm_->allreduce(job->data, job->count, DataType::kFloat32, ReduceOp::kSum);
    }
  } catch (...) {
    job->error = std::current_exception();
  }
  job->busy_s = now_s() - t0;
}

}  // namespace edl::optim::detail
