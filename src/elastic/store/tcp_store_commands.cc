// The embedded TCP store's command table and its replay journal.
//
// Exactly-once across reconnects (docs/store.md, "Reconnect"): a client names itself with a random
// 64-bit id in AUTH (key field) and numbers its requests; after a reconnect it re-sends every
// request still unanswered, with the same id. Every request that changed the data (set, add, a
// successful compare_set, a del that removed, set_lease) records its outcome under (client id,
// request id); a re-sent copy is answered from that record and not applied again. Requests that
// changed nothing (reads, waits, a failed compare_set) are simply run again. The journal keeps the
// last kJournalPerClient outcomes per client and at most kMaxSessions clients (the least recently
// used without an open connection are forgotten first).
// Runs on the loop thread only.
#include <algorithm>

#include "elastic/store/tcp_store_server_impl.h"

namespace edl {
namespace {

using store::Message;
using store::Op;
using store::Status;

constexpr size_t kJournalPerClient = 256;  // > the requests a client has in flight at once
constexpr size_t kMaxSessions = 4096;
constexpr size_t kMaxClientIdBytes = 64;
constexpr int64_t kMaxTimeoutMs = int64_t(365) * 24 * 3600 * 1000;  // clamp absurd ttls to a year

bool parse_int64(const std::string& s, int64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  size_t i = 0;
  bool neg = false;
  if (s[0] == '-' || s[0] == '+') {
    neg = s[0] == '-';
    i = 1;
    if (s.size() == 1) return false;
  }
  int64_t v = 0;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    int d = s[i] - '0';
    if (__builtin_mul_overflow(v, 10, &v)) return false;
    if (neg ? __builtin_sub_overflow(v, d, &v) : __builtin_add_overflow(v, d, &v)) return false;
  }
  *out = v;
  return true;
}

bool mutating(Op op) {
  return op == Op::kSet || op == Op::kAdd || op == Op::kCompareSet || op == Op::kDel || op == Op::kSetLease;
}

}  // namespace

std::optional<std::string> StoreServer::Impl::lookup(const std::string& key) const {
  auto it = data_.find(key);
  if (it == data_.end()) return std::nullopt;
  return it->second.value;
}

StoreServer::Impl::Session* StoreServer::Impl::session_of(const Conn& c) {
  if (c.session.empty()) return nullptr;
  auto it = sessions_.find(c.session);
  return it == sessions_.end() ? nullptr : &it->second;
}

void StoreServer::Impl::open_session(Conn& c, const std::string& client_id) {
  if (client_id.empty() || client_id.size() > kMaxClientIdBytes) return;  // no journal for this client
  c.session = client_id;
  Session& s = sessions_[client_id];
  ++s.conns;
  s.last_used = ++session_clock_;
  if (sessions_.size() > kMaxSessions) evict_sessions();
}

// Forgets the least recently used sessions without an open connection until under the cap.
void StoreServer::Impl::evict_sessions() {
  std::vector<std::pair<uint64_t, std::string>> idle;
  for (const auto& kv : sessions_)
    if (kv.second.conns == 0) idle.emplace_back(kv.second.last_used, kv.first);
  std::sort(idle.begin(), idle.end());
  for (size_t i = 0; i < idle.size() && sessions_.size() > kMaxSessions * 3 / 4; ++i) sessions_.erase(idle[i].second);
}

void StoreServer::Impl::handle(Conn& c, Message&& m) {
  ++requests_;
  if (m.op == Op::kWait || m.op == Op::kWaitChange) {
    start_wait(c, std::move(m));
    return;
  }
  if (!mutating(m.op) && m.op != Op::kGet && m.op != Op::kKeys) {
    bad_frame(c, std::string("unexpected op ") + store::op_name(m.op) + " after authentication");
    return;
  }
  Message r;
  r.op = Op::kResponse;
  r.id = m.id;
  Session* s = session_of(c);
  if (s) s->last_used = ++session_clock_;
  if (s && mutating(m.op)) {
    auto done = s->done.find(m.id);
    if (done != s->done.end()) {  // a re-sent request that was applied before the connection broke
      ++replayed_;
      r.status = done->second.status;
      r.number = done->second.number;
      send(c, r);
      return;
    }
  }
  if (apply(m, &r) && s) {
    s->done[m.id] = Outcome{r.status, r.number};
    while (s->done.size() > kJournalPerClient) s->done.erase(s->done.begin());
  }
  send(c, r);
}

// Runs one request against the data; r gets the reply. Returns whether the data changed.
bool StoreServer::Impl::apply(Message& m, Message* r) {
  bool changed = false;
  switch (m.op) {
    case Op::kSet:
      data_[m.key] = Entry{std::move(m.value), Clock::time_point::max()};
      changed = true;
      break;
    case Op::kGet:
      r->opt = lookup(m.key);
      break;
    case Op::kAdd:
      apply_add(m, r, &changed);
      break;
    case Op::kCompareSet:
      apply_compare_set(m, r, &changed);
      break;
    case Op::kDel:
      changed = data_.erase(m.key) > 0;
      if (!changed) r->status = Status::kFalse;
      break;
    case Op::kKeys:
      for (auto it = data_.lower_bound(m.key); it != data_.end() && it->first.compare(0, m.key.size(), m.key) == 0;
           ++it)
        r->list.push_back(it->first);
      break;
    case Op::kSetLease:
      apply_set_lease(m, r, &changed);
      break;
    default:
      break;
  }
  if (changed) touched(m.key);
  return changed;
}

void StoreServer::Impl::apply_add(const Message& m, Message* r, bool* changed) {
  int64_t cur = 0;
  auto it = data_.find(m.key);
  if (it != data_.end() && !parse_int64(it->second.value, &cur)) {
    r->status = Status::kInvalidArgument;
    r->value = "store add: value of key '" + m.key + "' is not an integer";
  } else if (__builtin_add_overflow(cur, m.number, &cur)) {
    r->status = Status::kInvalidArgument;
    r->value = "store add: key '" + m.key + "' would overflow int64";
  } else {
    data_[m.key] = Entry{std::to_string(cur), Clock::time_point::max()};
    r->number = cur;
    *changed = true;
  }
}

// On success the reply carries no value: the client knows `desired` (and a replayed success could
// not carry it without the journal storing values).
void StoreServer::Impl::apply_compare_set(Message& m, Message* r, bool* changed) {
  auto cur = lookup(m.key);
  if (cur != m.opt) {
    r->status = Status::kFalse;
    r->opt = std::move(cur);
    return;
  }
  data_[m.key] = Entry{std::move(m.value), Clock::time_point::max()};
  *changed = true;
}

void StoreServer::Impl::apply_set_lease(Message& m, Message* r, bool* changed) {
  if (m.number <= 0) {
    r->status = Status::kInvalidArgument;
    r->value = "store set_lease: ttl of key '" + m.key + "' must be positive, got " + std::to_string(m.number) + " ms";
    return;
  }
  auto exp = Clock::now() + std::chrono::milliseconds(std::min(m.number, kMaxTimeoutMs));
  data_[m.key] = Entry{std::move(m.value), exp};
  lease_queue_.emplace(exp, m.key);
  *changed = true;
}

}  // namespace edl
