// CountingStore: a view of a store that counts the requests made through it — every request, or
// only those of one thread (track_this_thread(): e.g. the rendezvous caller, not the lease threads)
// — and the reads of lease keys, and can make every get() slow (a busy store or machine). Tests that
// bound a worker's store requests give each worker its own view of one shared store.
//
// Thread-safety: as the wrapped store; the counters are atomic.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "edl/store.h"

namespace edl::elastic::testing {

class CountingStore final : public edl::Store {
 public:
  explicit CountingStore(std::shared_ptr<edl::Store> base) : base_(std::move(base)) {}
  // From now on only the calling thread's requests are counted.
  void track_this_thread() {
    owner_ = std::this_thread::get_id();
    tracking_ = true;
  }
  int64_t ops() const { return ops_.load(); }
  int64_t lease_reads() const { return lease_reads_.load(); }  // get() of a <job>/lease/ key
  void reset() { ops_ = 0, lease_reads_ = 0; }
  // Every get() takes `d` longer (0 = as fast as the base store).
  void slow_gets(std::chrono::milliseconds d) { slow_ms_ = d.count(); }

  void set(const std::string& k, const std::string& v) override { count(), base_->set(k, v); }
  std::optional<std::string> get(const std::string& k) override {
    count();
    if (k.find("/lease/") != std::string::npos && counted()) ++lease_reads_;
    if (int64_t ms = slow_ms_.load(); ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return base_->get(k);
  }
  int64_t add(const std::string& k, int64_t d) override { return count(), base_->add(k, d); }
  bool compare_set(const std::string& k, const std::optional<std::string>& e, const std::string& d,
                   std::optional<std::string>* c) override {
    return count(), base_->compare_set(k, e, d, c);
  }
  bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds t) override {
    return count(), base_->wait(keys, t);
  }
  std::optional<std::string> wait_change(const std::string& k, const std::optional<std::string>& known,
                                         std::chrono::milliseconds t) override {
    return count(), base_->wait_change(k, known, t);
  }
  bool del(const std::string& k) override { return count(), base_->del(k); }
  std::vector<std::string> keys(const std::string& p) override { return count(), base_->keys(p); }
  void set_lease(const std::string& k, const std::string& v, std::chrono::milliseconds ttl) override {
    count(), base_->set_lease(k, v, ttl);
  }

 private:
  bool counted() const { return !tracking_.load() || std::this_thread::get_id() == owner_; }
  void count() {
    if (counted()) ++ops_;
  }
  std::shared_ptr<edl::Store> base_;
  std::atomic<bool> tracking_{false};
  std::thread::id owner_;
  std::atomic<int64_t> ops_{0}, lease_reads_{0}, slow_ms_{0};
};

}  // namespace edl::elastic::testing
