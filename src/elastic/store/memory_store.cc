// In-process Store (tests, single-process worlds) and the PrefixStore wrapper.
#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <unordered_map>

#include "edl/error.h"
#include "edl/store.h"

namespace edl {

Store::~Store() = default;

std::vector<std::optional<std::string>> Store::get_many(const std::vector<std::string>& keys) {
  std::vector<std::optional<std::string>> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(get(k));
  return out;
}

std::vector<std::optional<std::string>> Store::get_many_watched(const std::vector<std::string>& keys) {
  return get_many(keys);
}

std::string Store::get_wait(const std::string& key, std::chrono::milliseconds timeout) {
  if (!wait({key}, timeout)) throw StoreError("store: timed out after " + std::to_string(timeout.count()) +
                                              " ms waiting for key '" + key + "'");
  auto v = get(key);
  if (!v) throw StoreError("store: key '" + key + "' vanished right after it appeared");
  return *v;
}

namespace {

using Clock = std::chrono::steady_clock;

class MemoryStore final : public Store {
 public:
  void set(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = Entry{value, Clock::time_point::max()};
    cv_.notify_all();
  }

  std::optional<std::string> get(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    expire_locked();
    auto it = data_.find(key);
    if (it == data_.end()) return std::nullopt;
    return it->second.value;
  }

  int64_t add(const std::string& key, int64_t delta) override {
    std::lock_guard<std::mutex> lock(mu_);
    expire_locked();
    int64_t cur = 0;
    auto it = data_.find(key);
    if (it != data_.end()) {
      try {
        size_t pos = 0;
        cur = std::stoll(it->second.value, &pos);
        if (pos != it->second.value.size()) throw std::invalid_argument("trailing");
      } catch (const std::exception&) {
        throw InvalidArgument("store add: value of key '" + key + "' is not an integer");
      }
    }
    cur += delta;
    data_[key] = Entry{std::to_string(cur), Clock::time_point::max()};
    cv_.notify_all();
    return cur;
  }

  bool compare_set(const std::string& key, const std::optional<std::string>& expected, const std::string& desired,
                   std::optional<std::string>* current) override {
    std::lock_guard<std::mutex> lock(mu_);
    expire_locked();
    auto it = data_.find(key);
    std::optional<std::string> cur;
    if (it != data_.end()) cur = it->second.value;
    if (cur != expected) {
      if (current) *current = cur;
      return false;
    }
    data_[key] = Entry{desired, Clock::time_point::max()};
    if (current) *current = desired;
    cv_.notify_all();
    return true;
  }

  bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    auto deadline = Clock::now() + timeout;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      expire_locked();
      bool all = std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return data_.count(k) > 0; });
      if (all) return true;
      if (wait_until_locked(lock, deadline)) return false;
    }
  }

  std::optional<std::string> wait_change(const std::string& key, const std::optional<std::string>& known,
                                         std::chrono::milliseconds timeout) override {
    auto deadline = Clock::now() + timeout;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      expire_locked();
      auto it = data_.find(key);
      std::optional<std::string> cur;
      if (it != data_.end()) cur = it->second.value;
      if (cur != known) return cur;
      if (wait_until_locked(lock, deadline)) return cur;
    }
  }

  bool del(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    expire_locked();
    bool existed = data_.erase(key) > 0;
    if (existed) cv_.notify_all();
    return existed;
  }

  std::vector<std::string> keys(const std::string& prefix) override {
    std::lock_guard<std::mutex> lock(mu_);
    expire_locked();
    std::vector<std::string> out;
    for (auto it = data_.lower_bound(prefix); it != data_.end() && it->first.compare(0, prefix.size(), prefix) == 0;
         ++it)
      out.push_back(it->first);
    return out;
  }

  void set_lease(const std::string& key, const std::string& value, std::chrono::milliseconds ttl) override {
    EDL_CHECK(ttl.count() > 0, InvalidArgument,
              "store set_lease: ttl of key '" + key + "' must be positive, got " + std::to_string(ttl.count()) + " ms");
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = Entry{value, Clock::now() + ttl};
    cv_.notify_all();
  }

 private:
  struct Entry {
    std::string value;
    Clock::time_point expires;
  };

  // Deletes expired leases; wakes waiters when something went away.
  void expire_locked() {
    auto now = Clock::now();
    bool removed = false;
    for (auto it = data_.begin(); it != data_.end();) {
      if (it->second.expires <= now) {
        it = data_.erase(it);
        removed = true;
      } else {
        ++it;
      }
    }
    if (removed) cv_.notify_all();
  }

  // Waits for a change or the earlier of deadline / next lease expiry. Returns true if the deadline passed.
  bool wait_until_locked(std::unique_lock<std::mutex>& lock, Clock::time_point deadline) {
    auto now = Clock::now();
    if (now >= deadline) return true;
    auto until = deadline;
    for (const auto& kv : data_) until = std::min(until, kv.second.expires);
    cv_.wait_until(lock, until);
    return false;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Entry> data_;
};

class PrefixStore final : public Store {
 public:
  PrefixStore(std::shared_ptr<Store> base, std::string prefix) : base_(std::move(base)), prefix_(std::move(prefix)) {}

  void set(const std::string& k, const std::string& v) override { base_->set(prefix_ + k, v); }
  std::optional<std::string> get(const std::string& k) override { return base_->get(prefix_ + k); }
  std::vector<std::optional<std::string>> get_many(const std::vector<std::string>& keys) override {
    return base_->get_many(prefixed(keys));
  }
  std::vector<std::optional<std::string>> get_many_watched(const std::vector<std::string>& keys) override {
    return base_->get_many_watched(prefixed(keys));
  }
  int64_t add(const std::string& k, int64_t d) override { return base_->add(prefix_ + k, d); }
  bool compare_set(const std::string& k, const std::optional<std::string>& e, const std::string& d,
                   std::optional<std::string>* c) override {
    return base_->compare_set(prefix_ + k, e, d, c);
  }
  bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds t) override {
    return base_->wait(prefixed(keys), t);
  }
  std::optional<std::string> wait_change(const std::string& k, const std::optional<std::string>& known,
                                         std::chrono::milliseconds t) override {
    return base_->wait_change(prefix_ + k, known, t);
  }
  bool del(const std::string& k) override { return base_->del(prefix_ + k); }
  std::vector<std::string> keys(const std::string& p) override {
    auto full = base_->keys(prefix_ + p);
    for (auto& k : full) k.erase(0, prefix_.size());
    return full;
  }
  void set_lease(const std::string& k, const std::string& v, std::chrono::milliseconds ttl) override {
    base_->set_lease(prefix_ + k, v, ttl);
  }

 private:
  std::vector<std::string> prefixed(const std::vector<std::string>& keys) const {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const auto& k : keys) full.push_back(prefix_ + k);
    return full;
  }

  std::shared_ptr<Store> base_;
  std::string prefix_;
};

}  // namespace

std::shared_ptr<Store> make_memory_store() { return std::make_shared<MemoryStore>(); }

std::shared_ptr<Store> make_prefix_store(std::shared_ptr<Store> base, const std::string& prefix) {
  EDL_CHECK(base != nullptr, InvalidArgument, "make_prefix_store: base store is null");
  return std::make_shared<PrefixStore>(std::move(base), prefix);
}

}  // namespace edl
