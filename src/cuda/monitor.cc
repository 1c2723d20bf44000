#include "cuda/monitor.h"

#include "edl/error.h"

namespace edl::cuda {

std::string describe(std::exception_ptr e) {
  if (!e) return "";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an exception of unknown type";
  }
}

CudaCompletion::CudaCompletion(std::shared_ptr<Monitor> monitor, std::shared_ptr<EventPool> pool, cudaEvent_t event,
                               Clock::time_point deadline, std::string what, std::vector<std::shared_ptr<void>> holds)
    : monitor_(std::move(monitor)),
      pool_(std::move(pool)),
      event_(event),
      deadline_(deadline),
      what_(std::move(what)),
      holds_(std::move(holds)) {}

CudaCompletion::~CudaCompletion() { pool_->release(event_); }

bool CudaCompletion::observe() {
  if (state_.load() != kPending) return true;
  const cudaError_t q = cudaEventQuery(event_);
  if (q == cudaErrorNotReady) return false;
  if (q != cudaSuccess) {
    (void)cudaGetLastError();
    monitor_->fail(std::make_exception_ptr(
        CommError("GPU path: " + what_ + ": the device reported " + cudaGetErrorString(q) + " (the device is suspect)")));
  }
  int expected = kPending;
  const int next = monitor_->failed() ? kFailed : kDone;
  if (state_.compare_exchange_strong(expected, next)) {
    std::vector<std::shared_ptr<void>> release;
    std::lock_guard<std::mutex> lock(mu_);
    release.swap(holds_);
  }
  return true;
}

bool CudaCompletion::query() { return observe() || monitor_->failed(); }

void CudaCompletion::wait() {
  Backoff backoff;
  for (;;) {
    if (observe()) {
      if (state_.load() == kDone) return;
      monitor_->rethrow();
    }
    if (monitor_->failed()) monitor_->rethrow();
    if (Clock::now() > deadline_) monitor_->fail_deadline(what_);
    backoff.pause();
  }
}

Monitor::Monitor(uint64_t generation, int device) : generation_(generation), device_(device) {
  thread_ = std::thread([this] { loop(); });
}

Monitor::~Monitor() { stop(); }

void Monitor::set_hooks(std::function<void(const std::string&)> teardown, std::function<std::exception_ptr()> probe) {
  std::lock_guard<std::mutex> lock(hook_mu_);
  teardown_ = std::move(teardown);
  probe_ = std::move(probe);
}

void Monitor::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    outstanding_.clear();  // completions keep the Monitor alive: no cycle once it stopped
  }
  std::lock_guard<std::mutex> lock(hook_mu_);
  teardown_ = nullptr;
  probe_ = nullptr;
}

void Monitor::rethrow() const {
  std::exception_ptr e;
  {
    std::lock_guard<std::mutex> lock(mu_);
    e = error_;
  }
  if (!e) throw InternalError("GPU path: rethrow() without a failure");
  std::rethrow_exception(e);
}

void Monitor::throw_if_failed() const {
  if (failed()) rethrow();
}

void Monitor::fail(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_.load()) return;
    error_ = e;
    failed_.store(true);
  }
  cv_.notify_all();
  std::lock_guard<std::mutex> lock(hook_mu_);
  if (teardown_) teardown_(describe(e));
}

void Monitor::fail_deadline(const std::string& what) {
  fail(std::make_exception_ptr(TimeoutError(
      "GPU path: " + what + " of generation " + std::to_string(generation_) +
      " did not finish on the device within the collective deadline (EDL_TIMEOUT_MS): a peer is stopped or hangs")));
}

void Monitor::track(const std::shared_ptr<CudaCompletion>& c) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    outstanding_.push_back(c);
  }
  cv_.notify_all();
}

bool Monitor::poll_outstanding() {
  std::vector<std::shared_ptr<CudaCompletion>> now;
  {
    std::lock_guard<std::mutex> lock(mu_);
    now = outstanding_;
  }
  std::vector<CudaCompletion*> over;
  for (const auto& c : now) {
    if (c->observe()) {
      over.push_back(c.get());
    } else if (!failed() && Clock::now() > c->deadline()) {
      fail_deadline(c->what());
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (CudaCompletion* c : over)
    for (size_t i = 0; i < outstanding_.size(); ++i)
      if (outstanding_[i].get() == c) {
        outstanding_[i] = outstanding_.back();
        outstanding_.pop_back();
        break;
      }
  return outstanding_.empty();
}

void Monitor::loop() {
  if (cudaSetDevice(device_) != cudaSuccess) (void)cudaGetLastError();
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      const auto period = outstanding_.empty() ? std::chrono::milliseconds(100) : std::chrono::milliseconds(1);
      cv_.wait_for(lock, period, [&] { return stop_; });
      if (stop_) return;
      if (outstanding_.empty()) continue;
    }
    std::exception_ptr e;
    {
      std::lock_guard<std::mutex> lock(hook_mu_);
      if (probe_ && !failed()) e = probe_();
    }
    if (e) fail(e);
    poll_outstanding();
  }
}

}  // namespace edl::cuda
