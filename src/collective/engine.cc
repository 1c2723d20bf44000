// Engine: negotiation (with response cache), fusion and execution of asynchronous collectives.
#include "collective/engine.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "collective/tcp_communicator.h"
#include "common/logging.h"
#include "edl/error.h"

namespace edl::collective {
namespace {

using Clock = std::chrono::steady_clock;

enum : uint8_t { kAllreduce = 1, kBroadcast = 2, kAllgather = 3, kBarrier = 4 };
constexpr uint32_t kNegotiationMagic = 0x45444c4eu;  // "EDLN"
constexpr size_t kMaxCacheEntries = 1u << 16;
constexpr std::chrono::seconds kStallWarning{60};

const char* kind_str(uint8_t k) {
  switch (k) {
    case kAllreduce: return "allreduce";
    case kBroadcast: return "broadcast";
    case kAllgather: return "allgather";
    case kBarrier: return "barrier";
  }
  return "collective";
}

// Auto names ("allreduce.17") never repeat, so they are not worth a cache entry.
bool is_auto_name(const std::string& n) {
  for (const char* k : {"allreduce.", "broadcast.", "allgather.", "barrier."}) {
    const size_t len = std::strlen(k);
    if (n.size() > len && n.compare(0, len, k) == 0)
      return std::all_of(n.begin() + static_cast<long>(len), n.end(), [](char c) { return c >= '0' && c <= '9'; });
  }
  return false;
}

template <typename T>
void put(std::vector<uint8_t>& b, T v) {
  size_t at = b.size();
  b.resize(at + sizeof(T));
  std::memcpy(b.data() + at, &v, sizeof(T));
}

class Reader {
 public:
  Reader(const uint8_t* p, size_t n, int rank) : p_(p), n_(n), rank_(rank) {}
  template <typename T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, p_ + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  std::string str(size_t len) {
    need(len);
    std::string s(reinterpret_cast<const char*>(p_ + at_), len);
    at_ += len;
    return s;
  }

 private:
  void need(size_t k) {
    if (n_ - at_ < k)
      throw CommError("collective engine: truncated negotiation message from rank " + std::to_string(rank_));
  }
  const uint8_t* p_;
  size_t n_;
  size_t at_ = 0;
  int rank_;
};

std::string describe_mismatch(const std::string& name, const Engine::Desc& a, const Engine::Desc& b, int rb) {
  std::string k = std::string(kind_str(a.kind)) + " '" + name + "'";
  std::string rr = ", rank " + std::to_string(rb);
  if (a.kind != b.kind)
    return "collective mismatch for '" + name + "': rank 0 called " + kind_str(a.kind) + rr + " called " +
           kind_str(b.kind);
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

Engine::Engine(std::shared_ptr<Communicator> comm, EngineOptions options)
    : comm_(std::move(comm)), options_(options) {
  if (!comm_) throw InvalidArgument("Engine needs a communicator");
  if (!options_.tick) tcp_ = dynamic_cast<TcpCommunicator*>(comm_.get());
  next_ = Clock::now();
  bell_->engine = this;
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() { stop(); }

void Engine::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    bell_->engine = nullptr;
  }
  bell_->ring();
  if (thread_.joinable()) {
    // A collective in flight may wait for peers that are stopping too: abort it.
    comm_->abort("collective engine stopped");
    thread_.join();
  }
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return bell_->helpers == 0; });
}

Engine::Doorbell::Doorbell() {
  fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) throw CommError(std::string("collective engine: eventfd(): ") + std::strerror(errno));
}

Engine::Doorbell::~Doorbell() { close(fd); }

void Engine::Doorbell::ring() {
  cv.notify_all();
  uint64_t one = 1;
  ssize_t ignored = write(fd, &one, sizeof(one));
  (void)ignored;
}

void Engine::Doorbell::help(detail::HandleState& s) {
  Engine* e;
  {
    std::lock_guard<std::mutex> lock(mu);
    e = engine;
    if (!e) return;
    ++helpers;
  }
  e->help(s);
  {
    std::lock_guard<std::mutex> lock(mu);
    --helpers;
  }
  cv.notify_all();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

Handle Engine::enqueue(RequestPtr r, const char* kind, bool will_wait) {
  r->state = std::make_shared<detail::HandleState>();
  r->state->listener = bell_;
  Handle h(r->state);
  std::lock_guard<std::mutex> lock(mu_);
  if (r->name.empty()) r->name = std::string(kind) + "." + std::to_string(auto_counter_[kind]++);
  if (broken_ || stopping_) {
    r->state->complete(broken_ ? broken_ : std::make_exception_ptr(AbortedError("collective engine stopped")));
    return h;
  }
  if (!in_flight_.insert(r->name).second)
    throw InvalidArgument(std::string(kind) + ": a collective named '" + r->name + "' is already pending on this rank");
  last_incoming_ = Clock::now();
  r->enqueued = last_incoming_;
  if (incoming_.empty()) first_incoming_ = last_incoming_;
  incoming_.push_back(std::move(r));
  bell_->queued = incoming_.size();
  // An idle engine starts its fusion window; a blocking caller starts the round itself.
  if (incoming_.size() == 1 && !will_wait) bell_->ring();
  return h;
}

Handle Engine::allreduce(void* data, size_t count, DataType dtype, ReduceOp op, const std::string& name,
                         bool will_wait) {
  (void)dtype_size(dtype);
  EDL_CHECK(data != nullptr || count == 0, InvalidArgument,
            "allreduce: data is null but count is " + std::to_string(count));
  EDL_CHECK(static_cast<uint8_t>(op) <= static_cast<uint8_t>(ReduceOp::kProduct), InvalidArgument,
            "allreduce: unknown ReduceOp value " + std::to_string(static_cast<int>(op)));
  auto r = std::make_shared<Request>();
  r->name = name;
  r->desc = Desc{kAllreduce, static_cast<uint8_t>(dtype), static_cast<uint8_t>(op), -1, count};
  r->data = data;
  return enqueue(std::move(r), "allreduce", will_wait);
}

Handle Engine::broadcast(void* data, size_t count, DataType dtype, int root, const std::string& name,
                         bool will_wait) {
  (void)dtype_size(dtype);
  EDL_CHECK(data != nullptr || count == 0, InvalidArgument,
            "broadcast: data is null but count is " + std::to_string(count));
  EDL_CHECK(root >= 0 && root < comm_->size(), InvalidArgument,
            "broadcast root " + std::to_string(root) + " is outside [0, " + std::to_string(comm_->size()) + ")");
  auto r = std::make_shared<Request>();
  r->name = name;
  r->desc = Desc{kBroadcast, static_cast<uint8_t>(dtype), 0, root, count};
  r->data = data;
  return enqueue(std::move(r), "broadcast", will_wait);
}

Handle Engine::allgather(const void* in, size_t count, DataType dtype, std::vector<uint8_t>* out,
                         std::vector<size_t>* counts, const std::string& name, bool will_wait) {
  (void)dtype_size(dtype);
  EDL_CHECK(in != nullptr || count == 0, InvalidArgument,
            "allgather: input is null but count is " + std::to_string(count));
  EDL_CHECK(out != nullptr, InvalidArgument, "allgather: output vector is null");
  auto r = std::make_shared<Request>();
  r->name = name;
  // The count differs legitimately between ranks: it is not part of the matched descriptor.
  r->desc = Desc{kAllgather, static_cast<uint8_t>(dtype), 0, -1, 0};
  r->in = in;
  r->out = out;
  r->counts = counts;
  r->local_count = count;
  return enqueue(std::move(r), "allgather", will_wait);
}

Handle Engine::barrier(const std::string& name, bool will_wait) {
  auto r = std::make_shared<Request>();
  r->name = name;
  r->desc = Desc{kBarrier, 0, 0, -1, 0};
  return enqueue(std::move(r), "barrier", will_wait);
}

// A round starts at `next` (the tick: one cycle_time after the previous round started) or, when
// requests arrive first, as soon as their burst is over (50 us without a new one, at most
// cycle_time after the first): an engine does not add a whole cycle of latency, and a burst of
// enqueues is still fused as a whole.
// Takes the round role once the next round is due. The engine thread: after a burst of new
// requests (or at once when a thread waits on one), when a peer starts the round (event-driven) or
// at next_. A helper (a thread in Handle::wait()) takes the role only when no round is running,
// then runs the round at once if it brought requests, else when a peer starts one.
bool Engine::acquire_round(detail::HandleState* helping, bool holding) {
  const auto gap = std::min<Clock::duration>(options_.cycle_time, std::chrono::microseconds(50));
  std::unique_lock<std::mutex> lock(mu_);
  bool mine = holding;  // a helper holds the role while it waits (and between its rounds)
  for (;;) {
    if (stopping_ || broken_) {
      if (mine) {
        busy_ = false;
        cv_.notify_all();
      }
      return false;
    }
    if (helping && !mine) {
      if (busy_) {  // a round is running on the engine thread: have it start the next one at once
        if (!incoming_.empty()) bell_->flush = true;
        lock.unlock();
        bell_->ring();
        return false;
      }
      busy_ = mine = true;
    }
    if (!helping && busy_) {
      cv_.wait(lock);
      continue;
    }
    if (!incoming_.empty() && (helping || bell_->flush)) break;  // a waiter: no burst window
    auto due = next_;
    if (!incoming_.empty()) due = std::min(due, std::min(first_incoming_ + options_.cycle_time, last_incoming_ + gap));
    if (Clock::now() >= due) break;
    if (!tcp_) {
      cv_.wait_until(lock, due);
      continue;
    }
    lock.unlock();
    const bool peer_started = tcp_->wait_incoming(bell_->fd, due);
    lock.lock();
    if (!helping && busy_) {
      // A helper took the role while this thread slept: leave the wake-up (if it was the doorbell)
      // to the helper, which waits on the same descriptors, and stand by.
      lock.unlock();
      bell_->ring();
      lock.lock();
      continue;
    }
    if (peer_started && !stopping_) break;  // join the round a peer has begun
  }
  busy_ = true;
  bell_->flush = false;
  bell_->queued = 0;
  while (!incoming_.empty()) {
    pending_.push_back(std::move(incoming_.front()));
    incoming_.pop_front();
  }
  return true;
}

void Engine::release_round() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    busy_ = false;
  }
  cv_.notify_all();
}

void Engine::run_round(bool helper) {
  const auto t0 = Clock::now();
  next_ = t0 + options_.cycle_time;
  Progress p;
  std::vector<RequestPtr> ready = negotiate(&p);
  // Next round. Event-driven (TcpCommunicator, the default): no ticks. The next round starts when
  // this rank has new requests (after their burst, or at once for a waiter) or when a peer starts
  // it (its first bytes arrive); the rank that submits a request last always starts the round that
  // runs it. idle_round only bounds how long pending requests go without a round (stall warnings).
  // Ticking: a rank whose requests all wait for other ranks (and that lacks nothing they listed)
  // goes straight into the next round and waits there; every other rank starts it at its next tick
  // or, when requests arrive first, as soon as their burst is complete.
  if (tcp_) next_ = t0 + options_.idle_round;
  else if (p.others_lack && !p.i_lack) next_ = t0;
  const auto t1 = Clock::now();
  if (!ready.empty()) {
    executing_ = ready;
    execute(ready);
    executing_.clear();
  }
  const auto t2 = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  stats_.negotiation_us += std::chrono::duration<double, std::micro>(t1 - t0).count();
  stats_.execution_us += std::chrono::duration<double, std::micro>(t2 - t1).count();
  if (helper) ++stats_.helped_rounds;
}

void Engine::loop() {
  try {
    while (acquire_round(nullptr, false)) {
      run_round(false);
      release_round();
    }
  } catch (const std::exception& e) {
    EDL_LOG(2) << "collective engine on rank " << comm_->rank() << " stopped: " << e.what();
    fail_all(std::current_exception());
    release_round();
    return;
  }
  // Stopping (or a helper hit the error): fail what is left, with the role.
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !busy_; });
    busy_ = true;
  }
  fail_all(std::make_exception_ptr(AbortedError("collective engine stopped")));
}

// A thread waiting on `s` runs the rounds itself while the engine thread is idle: the round
// starts without waking another thread, and the collectives run on a thread that is already on
// a CPU. Only for the event-driven engine.
void Engine::help(detail::HandleState& s) {
  if (!tcp_) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (incoming_.empty()) return;  // nothing waits for a burst window (the request is negotiating)
      bell_->flush = true;
    }
    bell_->ring();
    return;
  }
  bool holding = false;  // keep the role from one round to the next: no hand-over in between
  try {
    while (!s.finished()) {
      holding = acquire_round(&s, holding);
      if (!holding) return;
      run_round(true);
    }
  } catch (const std::exception& e) {
    EDL_LOG(2) << "collective engine on rank " << comm_->rank() << " stopped: " << e.what();
    fail_all(std::current_exception());
  }
  if (holding) release_round();
}

// One negotiation round. Message of each rank: magic, cache size, bitset over the response cache
// (requests whose name and descriptor were negotiated before), then full descriptors + names of
// the other requests. Every rank decodes every message, so every rank computes the same ready list.
std::vector<Engine::RequestPtr> Engine::negotiate(Progress* p) {
  const int n = comm_->size();
  std::vector<RequestPtr> ready;
  *p = Progress{};
  if (n == 1) {
    ready.swap(pending_);
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.cycles;
    return ready;
  }
  std::vector<uint64_t> bits((cache_.size() + 63) / 64, 0);
  std::vector<uint8_t> msg;
  std::vector<const Request*> fresh;
  for (const RequestPtr& r : pending_) {
    auto it = cache_ids_.find(r->name);
    if (it != cache_ids_.end() && cache_[it->second].second == r->desc)
      bits[it->second / 64] |= 1ull << (it->second % 64);
    else
      fresh.push_back(r.get());
  }
  put<uint32_t>(msg, kNegotiationMagic);
  put<uint32_t>(msg, static_cast<uint32_t>(cache_.size()));
  for (uint64_t w : bits) put<uint64_t>(msg, w);
  put<uint32_t>(msg, static_cast<uint32_t>(fresh.size()));
  for (const Request* r : fresh) {
    put<uint8_t>(msg, r->desc.kind);
    put<uint8_t>(msg, r->desc.dtype);
    put<uint8_t>(msg, r->desc.op);
    put<int32_t>(msg, r->desc.root);
    put<uint64_t>(msg, r->desc.count);
    put<uint32_t>(msg, static_cast<uint32_t>(r->name.size()));
    msg.insert(msg.end(), r->name.begin(), r->name.end());
  }
  std::vector<uint8_t> all;
  std::vector<size_t> counts;
  auto* tcp = dynamic_cast<TcpCommunicator*>(comm_.get());
  if (tcp && pending_.empty()) {
    // A round in which this rank lists nothing mostly waits for other ranks' ticks (ticks are not
    // aligned across ranks): block at once instead of spinning, so it costs no CPU and does not
    // make the transport see contention (which would switch off its spinning for the data
    // collectives that follow). Rounds with requests keep the data tuning: the other ranks are
    // usually about to join. This thread is the communicator's only user.
    AlgorithmTuning data_tuning = tcp->tuning(), quiet = data_tuning;
    quiet.spin = std::chrono::microseconds(0);
    tcp->set_tuning(quiet);
    try {
      tcp->allgatherv(msg.data(), msg.size(), DataType::kUInt8, all, &counts);
    } catch (...) {
      tcp->set_tuning(data_tuning);
      throw;
    }
    tcp->set_tuning(data_tuning);
  } else {
    comm_->allgatherv(msg.data(), msg.size(), DataType::kUInt8, all, &counts);
  }

  // Decode into integer keys: cache ids [0, C), then one key per distinct new name of this round.
  // In steady state every request is a cache bit and no string is touched.
  const size_t C = cache_.size();
  struct Entry {
    uint32_t key;
    Desc desc;
  };
  std::unordered_map<std::string, uint32_t> fresh_key;
  std::vector<std::string> fresh_name;  // key - C -> name
  std::vector<std::vector<Entry>> lists(n);
  size_t off = 0;
  for (int r = 0; r < n; ++r) {
    Reader rd(all.data() + off, counts[r], r);
    off += counts[r];
    if (rd.get<uint32_t>() != kNegotiationMagic || rd.get<uint32_t>() != C)
      throw CommError("collective engine: negotiation message of rank " + std::to_string(r) +
                      " is corrupt or its response cache diverged");
    for (size_t w = 0; w < bits.size(); ++w) {
      uint64_t word = rd.get<uint64_t>();
      while (word) {
        const uint32_t id = static_cast<uint32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(word)));
        word &= word - 1;
        if (id >= C) throw CommError("collective engine: bad cache id from rank " + std::to_string(r));
        lists[r].push_back(Entry{id, cache_[id].second});
      }
    }
    uint32_t nf = rd.get<uint32_t>();
    for (uint32_t i = 0; i < nf; ++i) {
      Desc d;
      d.kind = rd.get<uint8_t>();
      d.dtype = rd.get<uint8_t>();
      d.op = rd.get<uint8_t>();
      d.root = rd.get<int32_t>();
      d.count = rd.get<uint64_t>();
      std::string name = rd.str(rd.get<uint32_t>());
      uint32_t key;
      auto cached = cache_ids_.find(name);
      if (cached != cache_ids_.end()) {
        key = cached->second;  // known name, new descriptor
      } else {
        auto [it, inserted] = fresh_key.emplace(name, static_cast<uint32_t>(C + fresh_name.size()));
        if (inserted) fresh_name.push_back(name);
        key = it->second;
      }
      lists[r].push_back(Entry{key, d});
    }
  }
  const bool sent_names = !fresh.empty();
  const size_t total = C + fresh_name.size();
  auto name_of = [&](uint32_t key) -> const std::string& { return key < C ? cache_[key].first : fresh_name[key - C]; };

  // Presence count per key; rank 0's descriptor; the first differing descriptor of another rank.
  std::vector<int> present(total, 0);
  std::vector<Desc> desc0(total);
  std::vector<int> differ_rank(total, -1);
  std::vector<Desc> differ_desc(total);
  for (int r = 0; r < n; ++r) {
    for (const Entry& e : lists[r]) {
      ++present[e.key];
      if (r == 0) {
        desc0[e.key] = e.desc;
      } else if (differ_rank[e.key] < 0 && present[e.key] > 1 && !(e.desc == desc0[e.key])) {
        differ_rank[e.key] = r;
        differ_desc[e.key] = e.desc;
      }
    }
  }
  size_t listed_keys = 0;
  for (int c : present)
    if (c > 0) ++listed_keys;

  // This rank's pending requests by key.
  std::vector<int> local(total, -1);
  for (size_t i = 0; i < pending_.size(); ++i) {
    auto it = cache_ids_.find(pending_[i]->name);
    uint32_t key;
    if (it != cache_ids_.end()) key = it->second;
    else key = fresh_key.at(pending_[i]->name);
    local[key] = static_cast<int>(i);
  }

  // Ready = present on every rank; agreed order = rank 0's message order.
  std::vector<bool> taken(pending_.size(), false);
  size_t decided = 0;
  for (const Entry& e : lists[0]) {
    if (present[e.key] != n) continue;
    ++decided;
    const int i = local[e.key];
    if (i < 0) throw InternalError("collective engine: a ready request is not pending on this rank");
    taken[static_cast<size_t>(i)] = true;
    if (differ_rank[e.key] >= 0) {
      complete(pending_[static_cast<size_t>(i)],
               std::make_exception_ptr(MismatchError(
                   describe_mismatch(name_of(e.key), e.desc, differ_desc[e.key], differ_rank[e.key]))));
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
  if (listed_keys > decided) {
    size_t mine = 0;  // listed keys that are pending here (and so missing on some other rank)
    std::vector<int> present_on(pending_.size(), n);
    for (size_t i = 0; i < pending_.size(); ++i) {
      if (taken[i]) continue;
      // Not taken, so not newly cached this round: a cache id below C, or a key of this round.
      auto it = cache_ids_.find(pending_[i]->name);
      present_on[i] = present[it != cache_ids_.end() ? it->second : fresh_key.at(pending_[i]->name)];
      ++mine;
    }
    p->others_lack = mine > 0;
    p->i_lack = listed_keys - decided > mine;
    warn_stalled(present_on, n);
  }
  std::vector<RequestPtr> rest;
  for (size_t i = 0; i < pending_.size(); ++i)
    if (!taken[i]) rest.push_back(std::move(pending_[i]));
  pending_.swap(rest);
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.cycles;
  if (!sent_names) ++stats_.cached_cycles;
  return ready;
}

// Runs the ready requests in the agreed order. Consecutive allreduces are grouped by (dtype, op)
// into fused collectives of at most fusion_threshold_bytes; any other kind flushes the groups
// first, so the relative order of different kinds is kept.
void Engine::execute(const std::vector<RequestPtr>& ready) {
  std::vector<std::vector<RequestPtr>> groups;  // open groups, one per (dtype, op)
  std::vector<size_t> group_bytes;
  auto flush_all = [&] {
    for (auto& g : groups)
      if (!g.empty()) run_allreduce_group(g);
    groups.clear();
    group_bytes.clear();
  };
  for (const RequestPtr& r : ready) {
    if (r->desc.kind != kAllreduce) {
      flush_all();
      run_single(r);
      continue;
    }
    const size_t bytes = r->desc.count * dtype_size(static_cast<DataType>(r->desc.dtype));
    size_t gi = 0;
    while (gi < groups.size() &&
           !(groups[gi][0]->desc.dtype == r->desc.dtype && groups[gi][0]->desc.op == r->desc.op))
      ++gi;
    if (gi < groups.size() && group_bytes[gi] + bytes > options_.fusion_threshold_bytes) {
      run_allreduce_group(groups[gi]);
      groups.erase(groups.begin() + static_cast<long>(gi));
      group_bytes.erase(group_bytes.begin() + static_cast<long>(gi));
      gi = groups.size();
    }
    if (gi == groups.size()) {
      groups.emplace_back();
      group_bytes.push_back(0);
    }
    groups[gi].push_back(r);
    group_bytes[gi] += bytes;
  }
  flush_all();
}

void Engine::run_allreduce_group(const std::vector<RequestPtr>& group) {
  const DataType dt = static_cast<DataType>(group[0]->desc.dtype);
  const ReduceOp op = static_cast<ReduceOp>(group[0]->desc.op);
  const size_t es = dtype_size(dt);
  std::exception_ptr err;
  try {
    if (group.size() == 1) {
      comm_->allreduce(group[0]->data, group[0]->desc.count, dt, op);
    } else if (auto* tcp = dynamic_cast<TcpCommunicator*>(comm_.get())) {
      std::vector<Span> spans;
      spans.reserve(group.size());
      for (const RequestPtr& r : group) spans.push_back(Span{r->data, r->desc.count * es});
      tcp->allreduce_spans(spans, dt, op);
    } else {  // another Communicator implementation: classic fusion buffer
      size_t total = 0;
      for (const RequestPtr& r : group) total += r->desc.count * es;
      fusion_buf_.resize(total);
      size_t at = 0;
      for (const RequestPtr& r : group) {
        if (r->desc.count) std::memcpy(fusion_buf_.data() + at, r->data, r->desc.count * es);
        at += r->desc.count * es;
      }
      comm_->allreduce(fusion_buf_.data(), total / es, dt, op);
      at = 0;
      for (const RequestPtr& r : group) {
        if (r->desc.count) std::memcpy(r->data, fusion_buf_.data() + at, r->desc.count * es);
        at += r->desc.count * es;
      }
    }
  } catch (const InvalidArgument&) {
    err = std::current_exception();  // mismatch: only these requests fail; the communicator is fine
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.collectives;
    if (group.size() > 1) {
      ++stats_.fused_collectives;
      stats_.fused_tensors += group.size();
    }
  }
  for (const RequestPtr& r : group) complete(r, err);
}

void Engine::run_single(const RequestPtr& r) {
  std::exception_ptr err;
  try {
    switch (r->desc.kind) {
      case kBroadcast:
        comm_->broadcast(r->data, r->desc.count, static_cast<DataType>(r->desc.dtype), r->desc.root);
        break;
      case kAllgather:
        comm_->allgatherv(r->in, r->local_count, static_cast<DataType>(r->desc.dtype), *r->out, r->counts);
        break;
      case kBarrier:
        comm_->barrier();
        break;
      default:
        throw InternalError("collective engine: unexpected request kind " + std::to_string(r->desc.kind));
    }
  } catch (const InvalidArgument&) {
    err = std::current_exception();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.collectives;
  }
  complete(r, err);
}

void Engine::warn_stalled(const std::vector<int>& present_on, int n) {
  const auto now = Clock::now();
  for (size_t i = 0; i < pending_.size(); ++i) {
    Request& r = *pending_[i];
    if (r.stall_warned || present_on[i] >= n || now - r.enqueued < kStallWarning) continue;
    r.stall_warned = true;
    EDL_LOG(1) << "collective engine on rank " << comm_->rank() << ": '" << r.name << "' has waited "
               << std::chrono::duration_cast<std::chrono::seconds>(now - r.enqueued).count() << " s; only "
               << present_on[i] << " of " << n
               << " ranks submitted it (do all ranks issue the same collectives with the same names?)";
  }
}

void Engine::complete(const RequestPtr& r, std::exception_ptr e) {
  if (r->state->finished()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_.erase(r->name);
    ++stats_.completed;
  }
  r->state->complete(e);
}

void Engine::fail_all(std::exception_ptr e) {
  std::vector<RequestPtr> victims;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_) broken_ = e;
    for (auto& r : incoming_) victims.push_back(r);
    incoming_.clear();
    bell_->queued = 0;
  }
  for (auto& r : pending_) victims.push_back(r);
  for (auto& r : executing_) victims.push_back(r);
  pending_.clear();
  executing_.clear();
  for (auto& r : victims) complete(r, e);
}

}  // namespace edl::collective
