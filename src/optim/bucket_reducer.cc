#include "optim/bucket_reducer.h"

#include <chrono>

#if __has_include("collective/engine.h")
#include "collective/engine.h"
#define EDL_OPTIM_HAVE_ENGINE 1
#else
#define EDL_OPTIM_HAVE_ENGINE 0  // transitional: the collective core is being written
#endif

#include "common/timeline.h"
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
  job->launch_s = now_s();
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
    if (job->other != nullptr) {
      comm_->allreduce(job->other, job->count, job->type, job->op);
    } else if (job->half != nullptr) {
      to_half(job->data, job->prescale, job->half, job->count);
      comm_->allreduce(job->half, job->count, DataType::kFloat16, ReduceOp::kSum);
      from_half(job->half, job->data, job->count);
    } else {
      comm_->allreduce(job->data, job->count, DataType::kFloat32, ReduceOp::kSum);
    }
  } catch (...) {
    job->error = std::current_exception();
  }
  job->start_s = t0;
  job->end_s = now_s();
  job->busy_s = job->end_s - t0;
  if (timeline::on()) trace(*job);
}

// Timeline, the bucket's lane: "queue" (launch .. this thread starts it) and "allreduce" (one
// collective per bucket: its own fused id).
void BucketReducer::trace(const ReduceJob& job) const {
  using timeline::steady_seconds_to_us;
  timeline::Event e[2] = {timeline::Event(timeline::Lane::kTensor, "queue"),
                          timeline::Event(timeline::Lane::kTensor, "allreduce")};
  e[0].span(steady_seconds_to_us(job.launch_s), steady_seconds_to_us(job.start_s)).set_label(job.name);
  e[1].span(steady_seconds_to_us(job.start_s), steady_seconds_to_us(job.end_s)).set_label(job.name);
  e[1].arg("bytes", static_cast<int64_t>(job.count * (job.other ? dtype_size(job.type) : job.half ? 2 : 4)));
  e[1].arg("fused_id", static_cast<int64_t>(timeline::next_collective_id())).arg("fused_tensors", 1);
  e[1].arg("rank", comm_->rank());
  timeline::record(e, 2);
}

void to_half(const float* in, float scale, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = float_to_half(in[i] * scale);
}

void from_half(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = half_to_float(in[i]);
}

EngineReducer::EngineReducer(std::shared_ptr<collective::Engine> engine) : engine_(std::move(engine)) {
  EDL_ASSERT(engine_ != nullptr);
}

void EngineReducer::launch(ReduceJob* job) {
#if EDL_OPTIM_HAVE_ENGINE
  double t0 = now_s();
  job->start_s = t0;
  try {
    if (job->other != nullptr) {
      job->handle = engine_->allreduce(job->other, job->count, job->type, job->op, job->name);
    } else if (job->half != nullptr) {
      to_half(job->data, job->prescale, job->half, job->count);
      job->handle = engine_->allreduce(job->half, job->count, DataType::kFloat16, ReduceOp::kSum, job->name);
    } else {
      job->handle = engine_->allreduce(job->data, job->count, DataType::kFloat32, ReduceOp::kSum, job->name);
    }
  } catch (...) {
    job->error = std::current_exception();
    job->done = true;
  }
  job->busy_s = now_s() - t0;
#else
  job->error = std::make_exception_ptr(InternalError("this build has no collective engine"));
  job->done = true;
#endif
}

void EngineReducer::wait(ReduceJob* job) {
  if (job->done) return;
  try {
    job->handle.wait();
    if (job->half != nullptr) from_half(job->half, job->data, job->count);
  } catch (...) {
    job->error = std::current_exception();
  }
  job->done = true;
  job->handle = Handle();
  job->end_s = now_s();
  // The engine's own start and end are not visible: the job spans launch .. the end of wait().
  job->busy_s = job->end_s - job->start_s;
}

}  // namespace edl::optim::detail
