// Engine negotiation: the allgather of every rank's ready requests (response cache bits for names
// negotiated before, full descriptors for new ones), decoding into the agreed ready list (on the
// sparse mesh the Verdict comes from a combine instead: negotiation_round.cc), mismatch detection
// and the stall warnings. See engine.h and docs/collectives.md.
#include <algorithm>
#include <cstring>
#include <functional>
#include <unordered_map>

#include "collective/engine.h"
#include "collective/negotiation_message.h"
#include "collective/negotiation_reduce.h"
#include "collective/tcp_communicator.h"
#include "common/logging.h"
#include "edl/error.h"

namespace edl::collective {
namespace {

constexpr size_t kMaxCacheEntries = 1u << 16;
constexpr std::chrono::seconds kStallWarning{60};

// Auto names ("allreduce.17") never repeat, so they are not worth a cache entry.
bool is_auto_name(const std::string& n) {
  for (const char* k : {"allreduce.", "broadcast.", "allgather.", "barrier."}) {
    const size_t len = std::strlen(k);
    if (n.size() > len && n.compare(0, len, k) == 0)
      return std::all_of(n.begin() + static_cast<long>(len), n.end(), [](char c) { return c >= '0' && c <= '9'; });
  }
  return false;
}

std::string describe_mismatch(const std::string& name, const Engine::Desc& a, const Engine::Desc& b, int rb) {
  std::string k = std::string(kind_name(a.kind)) + " '" + name + "'";
  std::string rr = ", rank " + std::to_string(rb);
  if (a.kind != b.kind)
    return "collective mismatch for '" + name + "': rank 0 called " + kind_name(a.kind) + rr + " called " +
           kind_name(b.kind);
  if (a.dtype != b.dtype)
    return k + " dtype mismatch: rank 0 has " + dtype_name(static_cast<DataType>(a.dtype)) + rr + " has " +
           dtype_name(static_cast<DataType>(b.dtype));
  if (a.count != b.count)
    return k + " count mismatch: rank 0 has " + std::to_string(a.count) + " elements" + rr + " has " +
           std::to_string(b.count);
  if (a.op != b.op)
    return k + " op mismatch: rank 0 uses " + op_name(static_cast<ReduceOp>(a.op)) + rr + " uses " +
           op_name(static_cast<ReduceOp>(b.op));
  return k + " root mismatch: rank 0 uses root " + std::to_string(a.root) + rr + " uses root " +
         std::to_string(b.root);
}

}  // namespace

// A round in which this rank lists nothing mostly waits for other ranks' ticks (ticks are not
// aligned across ranks): block at once instead of spinning, so it costs no CPU and does not make
// the transport see contention (which would switch off its spinning for the data collectives that
// follow). Rounds with requests keep the data tuning: the other ranks are usually about to join.
// The round's thread is the communicator's only user.
void run_quietly(Communicator& comm, bool idle, const std::function<void()>& fn) {
  auto* tcp = dynamic_cast<TcpCommunicator*>(&comm);
  if (!tcp || !idle) return fn();
  AlgorithmTuning data_tuning = tcp->tuning(), quiet = data_tuning;
  quiet.spin = std::chrono::microseconds(0);
  tcp->set_tuning(quiet);
  try {
    fn();
  } catch (...) {
    tcp->set_tuning(data_tuning);
    throw;
  }
  tcp->set_tuning(data_tuning);
}

namespace {

// The decoded messages of one round as integer keys: cache ids [0, C), then one key per distinct
// new name of this round. In steady state every request is a cache bit and no string is touched.
struct Entry {
  uint32_t key;
  Engine::Desc desc;
};
struct Round {
  std::vector<std::vector<Entry>> lists;  // per rank, in its message order
  std::unordered_map<std::string, uint32_t> fresh_key;
  std::vector<std::string> fresh_name;  // key - C -> name
};

Round decode_round(const std::vector<uint8_t>& all, const std::vector<size_t>& counts, int n,
                   const std::vector<std::pair<std::string, Engine::Desc>>& cache,
                   const std::unordered_map<std::string, uint32_t>& cache_ids) {
  const size_t C = cache.size();
  if (counts.size() != static_cast<size_t>(n))
    throw CommError("collective engine: the negotiation allgather returned " + std::to_string(counts.size()) +
                    " messages for " + std::to_string(n) + " ranks");
  Round round;
  round.lists.resize(static_cast<size_t>(n));
  std::vector<int> listed_by(C, -1);  // key -> last rank that listed it (a rank lists a key once)
  size_t off = 0;
  for (int r = 0; r < n; ++r) {
    if (counts[r] > all.size() - off)
      throw CommError("collective engine: negotiation message of rank " + std::to_string(r) + " overruns the round");
    NegotiationMessage m = decode_negotiation(all.data() + off, counts[r], static_cast<uint32_t>(C), r);
    off += counts[r];
    auto& list = round.lists[static_cast<size_t>(r)];
    list.reserve(m.cached.size() + m.fresh.size());
    auto add = [&](uint32_t key, const Engine::Desc& d, const std::string& name) {
      if (listed_by.size() <= key) listed_by.resize(key + 1, -1);
      if (listed_by[key] == r)
        throw CommError("collective engine: negotiation message of rank " + std::to_string(r) + " lists '" + name +
                        "' twice");
      listed_by[key] = r;
      list.push_back(Entry{key, d});
    };
    for (uint32_t id : m.cached) add(id, cache[id].second, cache[id].first);
    for (auto& f : m.fresh) {
      uint32_t key;
      auto cached = cache_ids.find(f.name);
      if (cached != cache_ids.end()) {
        key = cached->second;  // known name, new descriptor
      } else {
        auto [it, inserted] = round.fresh_key.emplace(f.name, static_cast<uint32_t>(C + round.fresh_name.size()));
        if (inserted) round.fresh_name.push_back(f.name);
        key = it->second;
      }
      add(key, f.desc, f.name);
    }
  }
  return round;
}

}  // namespace

// One negotiation round. Message of each rank: magic, cache size, bitset over the response cache
// (requests whose name and descriptor were negotiated before), then full descriptors + names of
// the other requests. On the full mesh every rank decodes every message (an allgather); on the
// sparse mesh the messages are combined by recursive doubling (negotiation_round.cc). Either way
// every rank computes the same ready list.
std::vector<Engine::RequestPtr> Engine::negotiate(Progress* p) {
  const int n = comm_->size();
  *p = Progress{};
  if (n == 1) {
    std::vector<RequestPtr> ready;
    ready.swap(pending_);
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.cycles;
    return ready;
  }
  std::vector<uint64_t> bits((cache_.size() + 63) / 64, 0);
  std::vector<NegotiationMessage::Fresh> fresh;
  std::vector<std::pair<size_t, const Request*>> fresh_requests;  // (position in pending_, request)
  for (size_t i = 0; i < pending_.size(); ++i) {
    const RequestPtr& r = pending_[i];
    auto it = cache_ids_.find(r->name);
    if (it != cache_ids_.end() && cache_[it->second].second == r->desc) {
      bits[it->second / 64] |= 1ull << (it->second % 64);
    } else {
      fresh.push_back(NegotiationMessage::Fresh{r->desc, r->name});
      fresh_requests.emplace_back(i, r.get());
    }
  }
  auto* tcp = dynamic_cast<TcpCommunicator*>(comm_.get());
  Verdict v = tcp && tcp->sparse()
                  ? reduce_round(pending_.empty(), bits, fresh_requests)
                  : gather_round(pending_.empty(), encode_negotiation(static_cast<uint32_t>(cache_.size()), bits, fresh));
  std::vector<RequestPtr> ready = apply(v, p);
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.cycles;
  if (fresh.empty()) ++stats_.cached_cycles;
  return ready;
}

Engine::Verdict Engine::gather_round(bool idle, const std::vector<uint8_t>& msg) {
  const int n = comm_->size();
  std::vector<uint8_t> all;
  std::vector<size_t> counts;
  run_quietly(*comm_, idle, [&] { comm_->allgatherv(msg.data(), msg.size(), DataType::kUInt8, all, &counts); });
  // Decode into integer keys: cache ids [0, C), then one key per distinct new name of this round.
  Round round = decode_round(all, counts, n, cache_, cache_ids_);
  Verdict v;
  v.fresh_name = std::move(round.fresh_name);
  v.fresh_key = std::move(round.fresh_key);
  const size_t total = cache_.size() + v.fresh_name.size();
  // Presence count per key; rank 0's descriptor; the first differing descriptor of another rank.
  v.present.assign(total, 0);
  std::vector<Desc> desc0(total);
  std::vector<int> differ_rank(total, -1);
  std::vector<Desc> differ_desc(total);
  for (int r = 0; r < n; ++r) {
    for (const Entry& e : round.lists[r]) {
      ++v.present[e.key];
      if (r == 0) {
        desc0[e.key] = e.desc;
      } else if (differ_rank[e.key] < 0 && v.present[e.key] > 1 && !(e.desc == desc0[e.key])) {
        differ_rank[e.key] = r;
        differ_desc[e.key] = e.desc;
      }
    }
  }
  // Ready = present on every rank; agreed order = rank 0's message order.
  for (const Entry& e : round.lists[0])
    if (v.present[e.key] == n) v.ready.push_back(Verdict::Ready{e.key, e.desc, differ_rank[e.key], differ_desc[e.key]});
  return v;
}

std::vector<Engine::RequestPtr> Engine::apply(Verdict& v, Progress* p) {
  const int n = comm_->size();
  const size_t C = cache_.size();
  const size_t total = C + v.fresh_name.size();
  auto name_of = [&](uint32_t key) -> const std::string& { return key < C ? cache_[key].first : v.fresh_name[key - C]; };
  auto key_of = [&](const std::string& name) -> int64_t {
    auto it = cache_ids_.find(name);
    if (it != cache_ids_.end()) return it->second;
    auto f = v.fresh_key.find(name);
    return f == v.fresh_key.end() ? -1 : static_cast<int64_t>(f->second);
  };
  // This rank's pending requests by key.
  std::vector<int> local(total, -1);
  std::vector<int64_t> key_at(pending_.size());
  for (size_t i = 0; i < pending_.size(); ++i) {
    key_at[i] = key_of(pending_[i]->name);
    if (key_at[i] < 0) throw InternalError("collective engine: a pending request is missing from the negotiation");
    local[static_cast<size_t>(key_at[i])] = static_cast<int>(i);
  }
  std::vector<RequestPtr> ready;
  std::vector<bool> taken(pending_.size(), false);
  for (const Verdict::Ready& e : v.ready) {
    const int i = local[e.key];
    if (i < 0) throw InternalError("collective engine: a ready request is not pending on this rank");
    taken[static_cast<size_t>(i)] = true;
    if (e.differ_rank >= 0) {
      complete(pending_[static_cast<size_t>(i)],
               std::make_exception_ptr(MismatchError(describe_mismatch(name_of(e.key), e.desc, e.differ_desc, e.differ_rank))));
      continue;
    }
    ready.push_back(pending_[static_cast<size_t>(i)]);
    // Response cache: the same decision on every rank (same agreed list).
    if (e.key < C) {
      cache_[e.key].second = e.desc;
    } else if (!is_auto_name(name_of(e.key)) && cache_.size() < kMaxCacheEntries) {
      cache_ids_.emplace(name_of(e.key), static_cast<uint32_t>(cache_.size()));
      cache_.emplace_back(name_of(e.key), e.desc);
    }
  }
  // Another rank listed a request this rank lacks; this rank listed one another rank lacks.
  for (size_t k = 0; k < total && !p->i_lack; ++k) p->i_lack = v.present[k] != 0 && local[k] < 0;
  std::vector<int> present_on(pending_.size(), n);  // Verdict::kSome: not counted this round, no warning
  for (size_t i = 0; i < pending_.size(); ++i) {
    if (taken[i]) continue;
    p->others_lack = true;
    const int c = v.present[static_cast<size_t>(key_at[i])];
    if (c != Verdict::kSome) present_on[i] = c;
  }
  if (p->others_lack) warn_stalled(present_on, n);
  std::vector<RequestPtr> rest;
  for (size_t i = 0; i < pending_.size(); ++i)
    if (!taken[i]) rest.push_back(std::move(pending_[i]));
  pending_.swap(rest);
  return ready;
}

void Engine::warn_stalled(const std::vector<int>& present_on, int n) {
  const auto now = Clock::now();
  for (size_t i = 0; i < pending_.size(); ++i) {
    Request& r = *pending_[i];
    if (present_on[i] < n && options_.request_timeout.count() > 0 && now - r.enqueued >= options_.request_timeout) {
      const std::string why = "collective engine on rank " + std::to_string(comm_->rank()) + ": '" + r.name +
                              "' waited " +
                              std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now - r.enqueued).count()) +
                              " ms and " + std::to_string(n - present_on[i]) + " of " + std::to_string(n) +
                              " ranks never submitted it (deadline " + std::to_string(options_.request_timeout.count()) +
                              " ms, EDL_TIMEOUT_MS): a rank is stuck or issues other collectives";
      comm_->abort(why);
      throw TimeoutError(why);
    }
    if (r.stall_warned || present_on[i] >= n || now - r.enqueued < kStallWarning) continue;
    r.stall_warned = true;
    EDL_LOG(1) << "collective engine on rank " << comm_->rank() << ": '" << r.name << "' has waited "
               << std::chrono::duration_cast<std::chrono::seconds>(now - r.enqueued).count() << " s; only "
               << present_on[i] << " of " << n
               << " ranks submitted it (do all ranks issue the same collectives with the same names?)";
  }
}

}  // namespace edl::collective
