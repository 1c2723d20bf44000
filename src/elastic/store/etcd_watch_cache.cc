#include "elastic/store/etcd_watch_cache.h"

#include <algorithm>

#include "edl/error.h"

namespace edl::store {

EtcdWatchCache::~EtcdWatchCache() {
  std::vector<std::shared_ptr<Entry>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [key, e] : entries_) all.push_back(e);
    all.insert(all.end(), retired_.begin(), retired_.end());
    entries_.clear();
    retired_.clear();
  }
  for (auto& e : all) e->stop.stop();
  for (auto& e : all)
    if (e->thread.joinable()) e->thread.join();
}

std::pair<std::optional<std::string>, int64_t> EtcdWatchCache::read(const std::string& key) {
  Json r = client_->call_ok("/v3/kv/range", Json{{"key", b64(key)}}, "get of key '" + key + "'");
  std::optional<std::string> value;
  if (r.contains("kvs") && !r["kvs"].empty()) value = unb64(r["kvs"][0].value("value", std::string()));
  const int64_t revision = etcd_int(r.value("header", Json::object()), "revision");
  observed(key, value, revision);
  return {std::move(value), revision};
}

void EtcdWatchCache::observed(const std::string& key, const std::optional<std::string>& value, int64_t revision) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it != entries_.end()) update(*it->second, value, revision);
}

void EtcdWatchCache::wrote(const std::string& key, int64_t revision) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it != entries_.end()) it->second->written = std::max(it->second->written, revision);
}

std::optional<std::optional<std::string>> EtcdWatchCache::peek(const std::string& key) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(key);
    if (it != entries_.end() && !it->second->done && !it->second->error) {
      Entry& e = *it->second;
      e.last_wait = Clock::now();
      e.idle = std::max<std::chrono::milliseconds>(e.idle, kIdlePeek);
      if (e.synced) return e.value;
      return std::nullopt;  // renewing, or not yet in sync: read
    }
  }
  std::shared_ptr<Entry> e = acquire(key);  // opens the stream (and closes idle ones)
  {
    std::lock_guard<std::mutex> lock(mu_);
    e->idle = std::max<std::chrono::milliseconds>(e->idle, kIdlePeek);
  }
  release(e);
  return std::nullopt;
}

void EtcdWatchCache::update(Entry& e, std::optional<std::string> value, int64_t revision) {
  if (revision < e.revision) return;  // an event the read already covered, or a read older than an event
  e.value = std::move(value);
  e.revision = revision;
  cv_.notify_all();
}

// The stream thread of one key: watch, read once etcd confirmed the watch, then apply its events;
// renewed every kRenew until nobody waited on the key for kIdle, or stop().
void EtcdWatchCache::stream(const std::string& key, const std::shared_ptr<Entry>& e) {
  auto on_created = [&] {
    const auto sent = Clock::now();
    auto [value, revision] = read(key);
    std::lock_guard<std::mutex> lock(mu_);
    update(*e, std::move(value), revision);
    e->synced = true;
    e->synced_since = sent;
    cv_.notify_all();
    return false;
  };
  auto on_events = [&](const Json& events) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& ev : events) {
      const Json& kv = ev.contains("kv") ? ev["kv"] : Json::object();
      std::optional<std::string> value;
      if (ev.value("type", std::string("PUT")) != "DELETE") value = unb64(kv.value("value", std::string()));
      update(*e, std::move(value), etcd_int(kv, "mod_revision"));
    }
    return false;
  };
  try {
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        e->synced = false;  // until the renewed stream's read
        // Decided under the same lock as a waiter's acquire(): no waiter ever holds an ended stream.
        if (e->stop.stopped() || idle(*e, Clock::now())) {
          e->done = true;
          cv_.notify_all();
          return;
        }
      }
      client_->watch(key, Clock::now() + kRenew, on_created, on_events, &e->stop);
    }
  } catch (const std::exception& ex) {
    std::lock_guard<std::mutex> lock(mu_);
    e->error = ex.what();
    e->synced = false;
    e->done = true;
    cv_.notify_all();
  }
}

bool EtcdWatchCache::watching(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  return it != entries_.end() && !it->second->done;
}

std::shared_ptr<EtcdWatchCache::Entry> EtcdWatchCache::acquire(const std::string& key) {
  std::vector<std::shared_ptr<Entry>> stopping;
  std::shared_ptr<Entry> e;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = Clock::now();
    for (auto it = entries_.begin(); it != entries_.end();) {
      const Entry& x = *it->second;
      if (x.done || (idle(x, now) && it->first != key)) {
        stopping.push_back(it->second);
        retired_.push_back(it->second);
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
    auto& slot = entries_[key];
    if (!slot) {
      slot = std::make_shared<Entry>();
      slot->last_wait = now;
      std::shared_ptr<Entry> fresh = slot;
      slot->thread = std::thread([this, key, fresh] { stream(key, fresh); });
    }
    e = slot;
    e->waiters++;
    e->last_wait = now;
  }
  for (auto& x : stopping) x->stop.stop();
  join_retired();
  return e;
}

void EtcdWatchCache::release(const std::shared_ptr<Entry>& e) {
  std::lock_guard<std::mutex> lock(mu_);
  e->waiters--;
  e->last_wait = Clock::now();
}

// Joins the retired streams that have ended (a stopped stream ends within a read; one still reading
// the key after its stream closed is joined by a later call or the destructor).
void EtcdWatchCache::join_retired() {
  std::vector<std::shared_ptr<Entry>> ended;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = retired_.begin(); it != retired_.end();) {
      if ((*it)->done) {
        ended.push_back(*it);
        it = retired_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& x : ended)
    if (x->thread.joinable()) x->thread.join();
}

std::optional<std::string> EtcdWatchCache::wait_change(const std::string& key, const std::optional<std::string>& known,
                                                       Clock::time_point deadline) {
  const auto called = Clock::now();
  if (called >= deadline) return read(key).first;
  std::shared_ptr<Entry> e = acquire(key);
  struct Release {
    EtcdWatchCache* cache;
    const std::shared_ptr<Entry>& e;
    ~Release() { cache->release(e); }
  } release{this, e};
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (e->error) throw StoreError(*e->error);
    if (e->synced && e->value != known) {
      if (e->synced_since >= called) return e->value;  // the stream's read was sent after the wait began
      if (e->revision >= e->written) return e->value;   // not older than anything this Store read or wrote
      // Changed by the stream, behind our own write of the key: confirmed by a read.
      lock.unlock();
      auto [value, revision] = read(key);
      lock.lock();
      update(*e, value, revision);
      if (value != known) return value;
      if (e->value != known) cv_.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::milliseconds(20)));
      continue;
    }
    if (e->done || Clock::now() >= deadline) {
      if (e->synced) return known;  // the stream saw no change up to the deadline
      lock.unlock();
      return read(key).first;  // not in sync (renewing, or failing over): read
    }
    cv_.wait_until(lock, deadline);
  }
}

}  // namespace edl::store
