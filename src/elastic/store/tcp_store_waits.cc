// The embedded TCP store's server-side waits and leases: wait()/wait_change() register a waiter
// under each key they watch and are answered the moment a mutation (or a lease expiry) makes their
// condition true, or at their deadline. Runs on the loop thread only.
#include "elastic/store/tcp_store_server_impl.h"

namespace edl {

using store::Message;
using store::Op;
using store::Status;

namespace {

constexpr int64_t kMaxTimeoutMs = int64_t(365) * 24 * 3600 * 1000;  // clamp absurd timeouts to a year

}  // namespace

bool StoreServer::Impl::satisfied(const Waiter& w, Message* r) const {
  if (w.op == Op::kWait) {
    for (const auto& k : w.keys)
      if (!data_.count(k)) return false;
    r->status = Status::kOk;
    return true;
  }
  auto cur = lookup(w.keys[0]);
  if (cur == w.known) return false;
  r->opt = std::move(cur);
  return true;
}

void StoreServer::Impl::start_wait(Conn& c, Message&& m) {
  Waiter w;
  w.conn = c.id;
  w.req = m.id;
  w.op = m.op;
  if (m.op == Op::kWait) {
    w.keys = std::move(m.list);
  } else {
    w.keys = {std::move(m.key)};
    w.known = std::move(m.opt);
  }
  Message r;
  r.op = Op::kResponse;
  r.id = m.id;
  if (satisfied(w, &r)) {
    send(c, r);
    return;
  }
  if (m.number <= 0) {  // zero timeout: answer "not yet" right away
    timeout_reply(w, &r);
    send(c, r);
    return;
  }
  w.deadline = Clock::now() + std::chrono::milliseconds(std::min(m.number, kMaxTimeoutMs));
  uint64_t wid = next_waiter_id_++;
  for (const auto& k : w.keys) w.watching.push_back(watch_.emplace(k, wid));
  w.deadline_entry = waiter_deadlines_.emplace(w.deadline, wid);
  c.waiters.insert(wid);
  waiters_.emplace(wid, std::move(w));
}

void StoreServer::Impl::timeout_reply(const Waiter& w, Message* r) const {
  if (w.op == Op::kWait) {
    r->status = Status::kFalse;
  } else {
    r->opt = lookup(w.keys[0]);  // equals `known`
  }
}

void StoreServer::Impl::remove_waiter(uint64_t wid) {
  auto it = waiters_.find(wid);
  if (it == waiters_.end()) return;
  const Waiter& w = it->second;
  for (auto j : w.watching) watch_.erase(j);  // O(1) each: a key may have a thousand waiters
  waiter_deadlines_.erase(w.deadline_entry);
  auto c = conns_.find(w.conn);
  if (c != conns_.end()) c->second->waiters.erase(wid);
  waiters_.erase(it);
}

// Wakes every waiter on key whose condition now holds.
void StoreServer::Impl::touched(const std::string& key) {
  auto range = watch_.equal_range(key);
  if (range.first == range.second) return;
  std::vector<uint64_t> ids;
  for (auto j = range.first; j != range.second; ++j) ids.push_back(j->second);
  for (uint64_t wid : ids) {
    auto it = waiters_.find(wid);
    if (it == waiters_.end()) continue;
    Message r;
    r.op = Op::kResponse;
    r.id = it->second.req;
    if (!satisfied(it->second, &r)) continue;
    uint64_t conn = it->second.conn;
    remove_waiter(wid);
    auto c = conns_.find(conn);
    if (c != conns_.end()) send(*c->second, r);
  }
}

void StoreServer::Impl::expire_waiters(Clock::time_point now) {
  while (!waiter_deadlines_.empty() && waiter_deadlines_.begin()->first <= now) {
    uint64_t wid = waiter_deadlines_.begin()->second;
    auto it = waiters_.find(wid);
    if (it == waiters_.end()) {  // cannot happen: a waiter's entry goes with it
      waiter_deadlines_.erase(waiter_deadlines_.begin());
      continue;
    }
    Message r;
    r.op = Op::kResponse;
    r.id = it->second.req;
    timeout_reply(it->second, &r);
    uint64_t conn = it->second.conn;
    remove_waiter(wid);
    auto c = conns_.find(conn);
    if (c != conns_.end()) send(*c->second, r);
  }
}

void StoreServer::Impl::expire_leases(Clock::time_point now) {
  while (!lease_queue_.empty() && lease_queue_.begin()->first <= now) {
    auto node = lease_queue_.extract(lease_queue_.begin());
    auto it = data_.find(node.mapped());
    if (it != data_.end() && it->second.expires == node.key()) {
      data_.erase(it);
      touched(node.mapped());
    }
  }
}

}  // namespace edl
