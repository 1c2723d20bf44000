#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "edl/data/batch.h"
#include "edl/error.h"

namespace edl::data {

struct Prefetcher::Impl {
  struct Request {
    std::vector<uint64_t> indices;
    uint64_t salt = 0;
  };

  std::shared_ptr<const Dataset> dataset;
  BatchOptions options;
  size_t depth = 4;

  std::mutex mu;
  std::condition_variable cv;
  std::deque<Request> requests;   // submitted, not started
  std::deque<Batch> ready;        // assembled, in submission order
  std::vector<Batch> spare;       // recycled buffers
  bool building = false;          // the worker holds a request
  bool stopping = false;
  std::exception_ptr error;
  std::thread worker;

  void loop() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stopping || (!requests.empty() && ready.size() < depth && !error); });
      if (stopping) return;
      Request req = std::move(requests.front());
      requests.pop_front();
      Batch batch;
      if (!spare.empty()) {
        batch = std::move(spare.back());
        spare.pop_back();
      }
      building = true;
      lock.unlock();
      std::exception_ptr err;
      try {
        assemble_batch(*dataset, req.indices.data(), req.indices.size(), options, req.salt, &batch);
      } catch (...) {
        err = std::current_exception();
      }
      lock.lock();
      building = false;
      if (err)
        error = err;
      else
        ready.push_back(std::move(batch));
      cv.notify_all();
    }
  }
};

Prefetcher::Prefetcher(std::shared_ptr<const Dataset> dataset, BatchOptions options, size_t depth)
    : impl_(std::make_unique<Impl>()) {
  EDL_CHECK(dataset != nullptr, InvalidArgument, "Prefetcher: dataset is null");
  EDL_CHECK(depth >= 1, InvalidArgument, "Prefetcher: depth must be >= 1");
  // Validate the options once, here, on the caller's thread.
  Batch probe;
  assemble_batch(*dataset, nullptr, 0, options, 0, &probe);
  impl_->dataset = std::move(dataset);
  impl_->options = std::move(options);
  impl_->depth = depth;
  impl_->worker = std::thread([impl = impl_.get()] { impl->loop(); });
}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  impl_->worker.join();
}

void Prefetcher::submit(std::vector<uint64_t> indices, uint64_t salt) {
  const size_t n = impl_->dataset->size();
  for (uint64_t i : indices)
    EDL_CHECK(i < n, InvalidArgument,
              impl_->dataset->name() + ": record index " + std::to_string(i) + " out of range (dataset has " +
                  std::to_string(n) + " records)");
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->requests.push_back({std::move(indices), salt});
  }
  impl_->cv.notify_all();
}

void Prefetcher::submit_all(const std::vector<uint64_t>& indices, size_t batch_size, uint64_t salt) {
  EDL_CHECK(batch_size > 0, InvalidArgument, "Prefetcher::submit_all: batch_size must be > 0");
  for (size_t i = 0; i < indices.size(); i += batch_size) {
    size_t end = std::min(indices.size(), i + batch_size);
    submit(std::vector<uint64_t>(indices.begin() + i, indices.begin() + end), salt);
  }
}

bool Prefetcher::next(Batch* out) {
  EDL_CHECK(out != nullptr, InvalidArgument, "Prefetcher::next: out is null");
  std::unique_lock<std::mutex> lock(impl_->mu);
  auto& s = *impl_;
  s.cv.wait(lock, [&] { return s.error || !s.ready.empty() || (s.requests.empty() && !s.building); });
  if (s.error) std::rethrow_exception(s.error);
  if (s.ready.empty()) return false;
  std::swap(*out, s.ready.front());
  s.spare.push_back(std::move(s.ready.front()));
  s.ready.pop_front();
  lock.unlock();
  s.cv.notify_all();
  return true;
}

size_t Prefetcher::pending() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->requests.size() + impl_->ready.size() + (impl_->building ? 1 : 0);
}

void Prefetcher::clear() {
  std::unique_lock<std::mutex> lock(impl_->mu);
  auto& s = *impl_;
  s.requests.clear();
  s.cv.wait(lock, [&] { return !s.building; });
  for (auto& b : s.ready) s.spare.push_back(std::move(b));
  s.ready.clear();
  s.cv.notify_all();
}

}  // namespace edl::data
