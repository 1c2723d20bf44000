#include "elastic/timed_store.h"

#include <chrono>

#include "elastic/worker_metrics.h"

namespace edl::metrics {
namespace {

class TimedStore final : public Store {
 public:
  explicit TimedStore(std::shared_ptr<Store> base) : base_(std::move(base)) {}

  void set(const std::string& key, const std::string& value) override {
    timed([&] { base_->set(key, value); });
  }
  std::optional<std::string> get(const std::string& key) override {
    std::optional<std::string> v;
    timed([&] { v = base_->get(key); });
    return v;
  }
  std::vector<std::optional<std::string>> get_many(const std::vector<std::string>& keys) override {
    std::vector<std::optional<std::string>> v;
    timed([&] { v = base_->get_many(keys); });  // one request's latency: the lot is one round trip
    return v;
  }
  // Not timed: mostly served from watch streams (no request), whose reads would dilute the latencies.
  std::vector<std::optional<std::string>> get_many_watched(const std::vector<std::string>& keys) override {
    return base_->get_many_watched(keys);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    int64_t v = 0;
    timed([&] { v = base_->add(key, delta); });
    return v;
  }
  bool compare_set(const std::string& key, const std::optional<std::string>& expected, const std::string& desired,
                   std::optional<std::string>* current) override {
    bool ok = false;
    timed([&] { ok = base_->compare_set(key, expected, desired, current); });
    return ok;
  }
  bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    return base_->wait(keys, timeout);
  }
  std::optional<std::string> wait_change(const std::string& key, const std::optional<std::string>& known,
                                         std::chrono::milliseconds timeout) override {
    return base_->wait_change(key, known, timeout);
  }
  bool del(const std::string& key) override {
    bool ok = false;
    timed([&] { ok = base_->del(key); });
    return ok;
  }
  std::vector<std::string> keys(const std::string& prefix) override {
    std::vector<std::string> v;
    timed([&] { v = base_->keys(prefix); });
    return v;
  }
  void set_lease(const std::string& key, const std::string& value, std::chrono::milliseconds ttl) override {
    timed([&] { base_->set_lease(key, value, ttl); });
  }

 private:
  template <typename F>
  void timed(F&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();  // a failed request is not counted (its time is a timeout, not a latency)
    WorkerMetrics::instance().store_op(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }

  std::shared_ptr<Store> base_;
};

}  // namespace

std::shared_ptr<Store> make_timed_store(std::shared_ptr<Store> base) {
  return std::make_shared<TimedStore>(std::move(base));
}

}  // namespace edl::metrics
