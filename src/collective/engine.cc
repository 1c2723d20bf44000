// Engine: requests, the round role (when and on which thread rounds run), fusion and execution of
// asynchronous collectives. The negotiation itself is in negotiation.cc.
#include "collective/engine.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "collective/tcp_communicator.h"
#include "common/logging.h"
#include "common/timeline.h"
#include "edl/error.h"

namespace edl::collective {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

Engine::Engine(std::shared_ptr<Communicator> comm, EngineOptions options, std::shared_ptr<DeviceBackend> device)
    : comm_(std::move(comm)), options_(options), device_(std::move(device)) {
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
  ready_at_ = t1;
  if (timeline::on() && (!ready.empty() || !pending_.empty())) {
    timeline::Event e(timeline::Lane::kNegotiation, "negotiate");
    e.span(timeline::to_us(t0), timeline::to_us(t1)).arg("ready", static_cast<int64_t>(ready.size()));
    e.arg("waiting", static_cast<int64_t>(pending_.size())).arg("rank", comm_->rank());
    timeline::record(e);
  }
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
    if (!is_allreduce_kind(r->desc.kind)) {
      flush_all();
      run_single(r);
      continue;
    }
    const size_t bytes = r->desc.count * dtype_size(static_cast<DataType>(r->desc.dtype));
    size_t gi = 0;
    while (gi < groups.size() &&
           !(groups[gi][0]->desc.kind == r->desc.kind && groups[gi][0]->desc.dtype == r->desc.dtype &&
             groups[gi][0]->desc.op == r->desc.op))
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

namespace {
std::atomic<uint64_t> g_handle_wait_ns{0};
}  // namespace

uint64_t handle_wait_ns_total() { return g_handle_wait_ns.load(std::memory_order_relaxed); }
void add_handle_wait_ns(uint64_t ns) { g_handle_wait_ns.fetch_add(ns, std::memory_order_relaxed); }

void Engine::run_allreduce_group(const std::vector<RequestPtr>& group) {
  if (is_device_kind(group[0]->desc.kind)) return run_device(group);
  const DataType dt = static_cast<DataType>(group[0]->desc.dtype);
  const ReduceOp op = static_cast<ReduceOp>(group[0]->desc.op);
  const size_t es = dtype_size(dt);
  const auto started = Clock::now();
  std::exception_ptr err;
  const auto start = Clock::now();
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
  if (timeline::on()) trace_collective(group, start, Clock::now());
  {
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - started).count();
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.collectives;
    for (const RequestPtr& r : group) stats_.allreduce_bytes += r->desc.count * es;
    stats_.allreduce_us += us;
    if (group.size() > 1) {
      ++stats_.fused_collectives;
      stats_.fused_tensors += group.size();
    }
  }
  for (const RequestPtr& r : group) complete(r, err);
}

void Engine::run_single(const RequestPtr& r) {
  if (is_device_kind(r->desc.kind)) return run_device({r});
  std::exception_ptr err;
  const auto start = Clock::now();
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
  if (timeline::on()) trace_collective({r}, start, Clock::now());
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.collectives;
  }
  complete(r, err);
}

void Engine::trace_collective(const std::vector<RequestPtr>& group, Clock::time_point start, Clock::time_point end) {
  using timeline::Event;
  using timeline::Lane;
  const uint8_t kind = group[0]->desc.kind;
  const char* name = kind_name(kind);
  const int64_t id = static_cast<int64_t>(timeline::next_collective_id());
  const int64_t t_ready = timeline::to_us(ready_at_), t_start = timeline::to_us(start), t_end = timeline::to_us(end);
  int64_t total = 0;
  std::vector<Event> events;
  events.reserve(3 * group.size() + 1);
  for (const RequestPtr& r : group) {
    const size_t count = (kind == kAllgather || kind == kDeviceAllgather) ? r->local_count : r->desc.count;
    const int64_t bytes = static_cast<int64_t>(count * dtype_size(static_cast<DataType>(r->desc.dtype)));
    total += bytes;
    const int64_t t_enq = std::min(timeline::to_us(r->enqueued), t_ready);
    events.emplace_back(Lane::kTensor, "negotiate");
    events.back().span(t_enq, t_ready).set_label(r->name);
    events.emplace_back(Lane::kTensor, "queue");
    events.back().span(t_ready, t_start).set_label(r->name);
    events.emplace_back(Lane::kTensor, name);
    events.back().span(t_start, t_end).set_label(r->name);
    events.back().arg("bytes", bytes).arg("fused_id", id).arg("fused_tensors", static_cast<int64_t>(group.size()));
  }
  events.emplace_back(Lane::kCollectives, name);
  events.back().span(t_start, t_end).arg("fused_id", id).arg("tensors", static_cast<int64_t>(group.size()));
  events.back().arg("bytes", total).arg("rank", comm_->rank());
  timeline::record(events.data(), events.size());
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
  }
  if (device_) abort_device(e);
  for (auto& r : pending_) victims.push_back(r);
  for (auto& r : executing_) victims.push_back(r);
  pending_.clear();
  executing_.clear();
  for (auto& r : victims) complete(r, e);
}

}  // namespace edl::collective
