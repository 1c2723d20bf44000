// ShmTransport: waiting (spin, then sleep in poll() on the mesh sockets), the header exchange and
// the collectives over the shared segment. Protocol: shm_transport.h and docs/collectives.md.
#include "collective/shm_transport.h"

#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "collective/reduce.h"
#include "collective/span_index.h"
#include "edl/error.h"

namespace edl::collective {
namespace {

constexpr size_t kLine = 128;  // one counter per line: no false sharing between writers
constexpr size_t kCtlBytes = 8 * kLine;  // 5 counter lines + 2 headers (96 B) rounded up
constexpr size_t kHeaderOffset = 5 * kLine;
constexpr int kSlots = 2;

size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

ShmLayout ShmLayout::make(int size) {
  ShmLayout l;
  l.size = size;
  l.ctl_offset = 4096;
  l.data_offset = round_up(l.ctl_offset + static_cast<size_t>(size) * kCtlBytes, 4096);
  l.rank_stride = 2 * l.eager_bytes + kSlots * l.slot_bytes;
  l.total = l.data_offset + static_cast<size_t>(size) * l.rank_stride;
  return l;
}

ShmTransport::ShmTransport(TcpCommunicator& comm, void* base, const ShmLayout& layout)
    : c_(comm), base_(base), layout_(layout), n_(comm.size_), r_(comm.rank_),
      lost_(new std::atomic<int>[static_cast<size_t>(comm.size_)]) {
  for (int p = 0; p < n_; ++p) lost_[p].store(0);
  evict_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (evict_fd_ < 0) {
    munmap(base_, layout_.total);
    throw CommError("eventfd(): " + errno_text(errno));
  }
}

ShmTransport::~ShmTransport() {
  munmap(base_, layout_.total);
  close(evict_fd_);
}

uint64_t* ShmTransport::word(int rank, Counter c) const {
  return reinterpret_cast<uint64_t*>(static_cast<char*>(base_) + layout_.ctl_offset +
                                     static_cast<size_t>(rank) * kCtlBytes + static_cast<size_t>(c) * kLine);
}

ShmTransport::Header* ShmTransport::header_slot(int rank, uint64_t seq) const {
  return reinterpret_cast<Header*>(static_cast<char*>(base_) + layout_.ctl_offset +
                                   static_cast<size_t>(rank) * kCtlBytes + kHeaderOffset) +
         (seq & 1);
}

uint8_t* ShmTransport::eager_buf(int rank, uint64_t seq) const {
  return static_cast<uint8_t*>(base_) + layout_.data_offset + static_cast<size_t>(rank) * layout_.rank_stride +
         (seq & 1) * layout_.eager_bytes;
}

uint8_t* ShmTransport::slot(int rank, uint64_t round) const {
  return static_cast<uint8_t*>(base_) + layout_.data_offset + static_cast<size_t>(rank) * layout_.rank_stride +
         2 * layout_.eager_bytes + (round % kSlots) * layout_.slot_bytes;
}

size_t ShmTransport::window_bytes() const {
  return std::clamp<size_t>(c_.tuning_.shm_chunk_bytes, 4096, layout_.slot_bytes);
}

// ---- waiting --------------------------------------------------------------------------------

void ShmTransport::post(Counter c, uint64_t value) {
  __atomic_store_n(word(r_, c), value, __ATOMIC_RELEASE);
  // Pairs with the fence in block(): either the sleeper sees the new value before it sleeps, or we
  // see its sleeping flag and wake it.
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  for (int p = 0; p < n_; ++p) {
    if (p == r_ || !__atomic_load_n(word(p, kSleeping), __ATOMIC_RELAXED)) continue;
    const char b = 'w';
    ssize_t ignored = send(c_.send_fd_[p], &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL);  // full buffer: already woken
    (void)ignored;
  }
}

bool ShmTransport::ready(Counter c, uint64_t target, int only) const {
  for (int p = 0; p < n_; ++p)
    if (p != r_ && (only < 0 || p == only) && load(p, c) < target) return false;
  return true;
}

void ShmTransport::wait_for(Counter c, uint64_t target, const char* what, int only) {
  if (ready(c, target, only)) return;
  const auto start = Clock::now();
  for (;;) {
    if (c_.aborted_.load(std::memory_order_relaxed)) c_.throw_aborted();
    for (int i = 0; i < 128; ++i) {
      if (ready(c, target, only)) return;
      cpu_relax();
    }
    const auto now = Clock::now();
    if (now >= c_.deadline_) timeout(c, target, what, only);
    if (now - start < c_.tuning_.spin) {
      // Yield between rounds so that a rank sharing this core runs. Unlike the TCP path this keeps
      // spinning under CPU contention: the peers we wait for are usually runnable ranks of the same
      // collective, and handing them the core beats a sleep + wake-up byte (4 ranks on 2 cores:
      // 4 KiB allreduce 22 us instead of 88 us; docs/collectives.md).
      sched_yield();
      continue;
    }
    block(c, target, what, only);
    if (ready(c, target, only)) return;
  }
}

void ShmTransport::drain(int p) {
  char buf[256];
  for (;;) {
    ssize_t r = recv(c_.recv_fd_[p], buf, sizeof(buf), MSG_DONTWAIT);
    if (r > 0) continue;
    if (r == 0) {
      lost_[p].store(-1);
    } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      lost_[p].store(errno);
    }
    return;
  }
}

void ShmTransport::block(Counter c, uint64_t target, const char* what, int only) {
  // A peer we wait for whose socket already failed: it is gone (its last posts were seen above).
  for (int p = 0; p < n_; ++p)
    if (p != r_ && lost_[p].load() != 0 && (only < 0 || p == only) && load(p, c) < target)
      c_.io_error(p, lost_[p].load(), false, what);
  ++want_sleep_;
  std::unique_lock<std::mutex> lock(sleep_mu_, std::try_to_lock);
  if (!lock.owns_lock()) {
    const uint64_t one = 1;
    ssize_t ignored = write(evict_fd_, &one, sizeof(one));
    (void)ignored;
    lock.lock();
  }
  --want_sleep_;
  __atomic_store_n(word(r_, kSleeping), 1, __ATOMIC_SEQ_CST);
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if (ready(c, target, only)) {
    __atomic_store_n(word(r_, kSleeping), 0, __ATOMIC_RELAXED);
    return;
  }
  std::vector<pollfd> fds;
  std::vector<int> peers;
  for (int p = 0; p < n_; ++p)
    if (p != r_ && lost_[p].load() == 0) fds.push_back(pollfd{c_.recv_fd_[p], POLLIN, 0}), peers.push_back(p);
  fds.push_back(pollfd{c_.event_fd_, POLLIN, 0});
  const auto left_us = std::chrono::duration_cast<std::chrono::microseconds>(c_.deadline_ - Clock::now()).count();
  const int ms = static_cast<int>(std::clamp<long long>((left_us + 999) / 1000, 0, 200));
  poll(fds.data(), fds.size(), ms);
  __atomic_store_n(word(r_, kSleeping), 0, __ATOMIC_RELAXED);
  if (c_.aborted_.load()) c_.throw_aborted();
  for (size_t i = 0; i < peers.size(); ++i)
    if (fds[i].revents) drain(peers[i]);
}

void ShmTransport::timeout(Counter c, uint64_t target, const char* what, int only) const {
  std::string peers;
  for (int p = 0; p < n_; ++p)
    if (p != r_ && (only < 0 || p == only) && load(p, c) < target)
      peers += (peers.empty() ? "" : ", ") + std::to_string(p);
  throw TimeoutError(std::string(what) + " on rank " + std::to_string(r_) + " timed out after " +
                     std::to_string(c_.options_.timeout.count()) +
                     " ms (EDL_TIMEOUT_MS) waiting for rank(s) " + (peers.empty() ? "?" : peers) +
                     " (shared-memory transport)");
}

bool ShmTransport::wait_incoming(int extra_fd, Clock::time_point until) {
  auto entered = [&] {
    for (int p = 0; p < n_; ++p)
      if (p != r_ && load(p, kEntered) > c_.seq_) return true;
    return false;
  };
  auto doorbell = [&](const pollfd& pf) {
    if (extra_fd < 0 || !pf.revents) return false;
    uint64_t v;
    ssize_t ignored = read(extra_fd, &v, sizeof(v));
    (void)ignored;
    return true;
  };
  for (;;) {
    if (c_.aborted() || entered()) return true;
    for (int p = 0; p < n_; ++p)
      if (lost_[p].load() != 0) return true;  // the next collective reports it
    const auto now = Clock::now();
    if (now >= until) return false;
    const long long left_ns = std::min<long long>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(until - now).count(), 1000000000LL);
    std::unique_lock<std::mutex> lock(sleep_mu_, std::defer_lock);
    if (want_sleep_.load() > 0 || !lock.try_lock()) {
      // A collective on another thread sleeps on the sockets: re-check every millisecond.
      pollfd fds[2] = {{c_.event_fd_, POLLIN, 0}, {extra_fd, POLLIN, 0}};
      const long long slice = std::min<long long>(left_ns, 1000000LL);
      const timespec ts{0, static_cast<long>(slice)};
      ppoll(fds, extra_fd >= 0 ? 2 : 1, &ts, nullptr);
      if (doorbell(fds[1])) return entered();
      continue;
    }
    uint64_t stale;
    while (read(evict_fd_, &stale, sizeof(stale)) > 0) {
    }
    __atomic_store_n(word(r_, kSleeping), 1, __ATOMIC_SEQ_CST);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (entered()) {
      __atomic_store_n(word(r_, kSleeping), 0, __ATOMIC_RELAXED);
      return true;
    }
    std::vector<pollfd> fds;
    std::vector<int> peers;
    for (int p = 0; p < n_; ++p)
      if (p != r_) fds.push_back(pollfd{c_.recv_fd_[p], POLLIN, 0}), peers.push_back(p);
    fds.push_back(pollfd{c_.event_fd_, POLLIN, 0});
    fds.push_back(pollfd{evict_fd_, POLLIN, 0});
    if (extra_fd >= 0) fds.push_back(pollfd{extra_fd, POLLIN, 0});
    const timespec ts{static_cast<time_t>(left_ns / 1000000000LL), static_cast<long>(left_ns % 1000000000LL)};
    int rc = ppoll(fds.data(), fds.size(), &ts, nullptr);
    __atomic_store_n(word(r_, kSleeping), 0, __ATOMIC_RELAXED);
    if (rc <= 0) continue;
    for (size_t i = 0; i < peers.size(); ++i)
      if (fds[i].revents) drain(peers[i]);
    if (doorbell(fds.back())) return entered();
  }
}

// ---- collectives ------------------------------------------------------------------------------

std::vector<ShmTransport::Header> ShmTransport::exchange(const Header& mine) {
  const uint64_t seq = c_.seq_;
  *header_slot(r_, seq) = mine;
  post(kEntered, seq);
  const char* what = kind_name(mine.kind);
  wait_for(kEntered, seq, what);
  std::vector<Header> all(n_);
  for (int p = 0; p < n_; ++p) all[p] = *header_slot(p, seq);
  for (int p = 0; p < n_; ++p) {  // this rank's own header too: every rank reaches the same verdict
    std::string problem = header_problem(all[p], mine, p, c_.options_.max_gather_bytes);
    if (!problem.empty())
      throw CommError(std::string(what) + " on rank " + std::to_string(r_) + ": " + problem + " (shared memory)");
    if (all[p].pad != mine.pad && all[p].kind == mine.kind)
      throw CommError(std::string(what) + " on rank " + std::to_string(r_) + ": rank " + std::to_string(p) +
                      " runs another part of the hierarchical allreduce (" + std::to_string(all[p].pad) +
                      ", this rank " + std::to_string(mine.pad) + ")");
    if (all[p].reserved != mine.reserved)
      throw CommError(std::string(what) + " on rank " + std::to_string(r_) + ": rank " + std::to_string(p) +
                      " stages " + std::to_string(all[p].reserved) + " bytes per round, this rank " +
                      std::to_string(mine.reserved) + " (shm_chunk_bytes tunings differ)");
  }
  std::string mm = c_.mismatch(all);
  if (!mm.empty()) throw MismatchError(mm);  // nothing was moved yet: the communicator stays usable
  return all;
}

bool ShmTransport::allreduce(const std::vector<Span>& spans, size_t count, DataType dt, ReduceOp op) {
  const size_t es = dtype_size(dt);
  const size_t bytes = count * es;
  const bool eager = bytes <= std::min(c_.tuning_.shm_eager_bytes, layout_.eager_bytes);
  const uint64_t seq = c_.seq_;
  if (eager) {
    uint8_t* dst = eager_buf(r_, seq);
    for (const Span& s : spans) {
      if (s.bytes) std::memcpy(dst, s.data, s.bytes);
      dst += s.bytes;
    }
  }
  Header h{kHeaderMagic, static_cast<uint8_t>(Kind::kAllreduce), static_cast<uint8_t>(dt), static_cast<uint8_t>(op),
           0, -1, r_, count, seq, eager ? bytes : 0, window_bytes()};
  std::vector<Header> all = exchange(h);
  for (int p = 0; p < n_; ++p)
    if (all[p].payload != h.payload)
      throw CommError("allreduce on rank " + std::to_string(r_) + ": rank " + std::to_string(p) + " staged " +
                      std::to_string(all[p].payload) + " eager bytes where this rank staged " +
                      std::to_string(h.payload) + " (shm_eager_bytes tunings differ?)");
  if (!eager) {
    allreduce_rounds(spans, count, dt, op);
    return false;
  }
  // Direct: every rank reduces all contributions in rank order (bitwise equal results everywhere).
  std::vector<const void*> contrib(n_);
  size_t off = 0;
  for (const Span& s : spans) {
    for (int p = 0; p < n_; ++p) contrib[p] = p == r_ ? s.data : static_cast<const void*>(eager_buf(p, seq) + off);
    reduce_ordered(s.data, contrib.data(), n_, s.bytes / es, dt, op, n_);
    off += s.bytes;
  }
  return true;
}

// Reduce-scatter + allgather in rounds over windows of window_bytes(): in round k every rank
//   publish: copies its data of the other ranks' slices into its slot k%2 (once every rank has
//            gathered round k-2, which read that slot), posts kPublished;
//   reduce:  reduces its own slice from every rank's slot (its own data from its buffer), in rank
//            order, into its buffer, copies the result into its slot, posts kReduced;
//   gather:  copies every other rank's reduced slice from that rank's slot, posts kGathered.
// Round k+1 is published before round k is reduced, so copying and reducing overlap across ranks.
// Reduce-scatter alone (phases 1, hierarchical allreduce) posts kReduced and kGathered right after
// its reduction (nobody reads its slot afterwards); allgather alone (phases 2) first copies its own
// slice into its slot (as "reduce" would) and posts kPublished and kReduced. Every round posts every
// counter once, so mixed sequences of collectives keep the counters in step on all ranks.
std::vector<Span> ShmTransport::allreduce_rounds(const std::vector<Span>& spans, size_t count, DataType dt,
                                                 ReduceOp op, int phases) {
  const size_t es = dtype_size(dt);
  const size_t win = std::max<size_t>(static_cast<size_t>(n_), window_bytes() / es);  // elements per round
  const uint64_t rounds = (count + win - 1) / win;
  const uint64_t base = rounds_;
  const bool scatter = phases & 1, gather = phases & 2;
  SpanIndex index(spans);
  std::vector<Span> mine_spans;
  // Element range [first, first + len) of slice j in round k; the window's slices as even as possible.
  auto slice = [&](uint64_t k, int j, size_t* first, size_t* len) {
    const size_t w0 = k * win, wl = std::min(win, count - w0);
    const size_t q = wl / n_, rem = wl % n_;
    *first = w0 + j * q + std::min<size_t>(j, rem);
    *len = q + (static_cast<size_t>(j) < rem ? 1 : 0);
  };
  auto publish = [&](uint64_t k) {
    if (k >= kSlots) wait_for(kGathered, base + k + 1 - kSlots, "allreduce");
    uint8_t* dst = slot(r_, base + k);
    const size_t w0 = k * win;
    for (int j = 0; j < n_; ++j) {
      if (j == r_) continue;
      size_t first, len;
      slice(k, j, &first, &len);
      index.for_each(first * es, len * es, [&](char* p, size_t take, size_t rel) {
        std::memcpy(dst + (first - w0) * es + rel, p, take);
      });
    }
    post(kPublished, base + k + 1);
  };
  std::vector<const void*> contrib(n_);
  for (uint64_t k = 0; k < rounds; ++k) {
    const size_t w0 = k * win;
    size_t first, len;
    slice(k, r_, &first, &len);
    uint8_t* mine = slot(r_, base + k) + (first - w0) * es;
    if (scatter) {
      if (k == 0) publish(0);
      if (k + 1 < rounds) publish(k + 1);
      wait_for(kPublished, base + k + 1, "allreduce");
      index.for_each(first * es, len * es, [&](char* p, size_t take, size_t rel) {
        for (int j = 0; j < n_; ++j)
          contrib[j] = j == r_ ? static_cast<const void*>(p) : slot(j, base + k) + (first - w0) * es + rel;
        reduce_ordered(p, contrib.data(), n_, take / es, dt, op, n_);
        if (gather) std::memcpy(mine + rel, p, take);
      });
    } else {
      if (k >= kSlots) wait_for(kGathered, base + k + 1 - kSlots, "allgather");
      index.for_each(first * es, len * es, [&](char* p, size_t take, size_t rel) { std::memcpy(mine + rel, p, take); });
      post(kPublished, base + k + 1);
    }
    post(kReduced, base + k + 1);
    if (!gather) {
      index.for_each(first * es, len * es, [&](char* p, size_t take, size_t) { mine_spans.push_back(Span{p, take}); });
      post(kGathered, base + k + 1);
      continue;
    }
    wait_for(kReduced, base + k + 1, "allreduce");
    for (int j = 0; j < n_; ++j) {
      if (j == r_) continue;
      slice(k, j, &first, &len);
      const uint8_t* src = slot(j, base + k) + (first - w0) * es;
      index.for_each(first * es, len * es, [&](char* p, size_t take, size_t rel) { std::memcpy(p, src + rel, take); });
    }
    post(kGathered, base + k + 1);
  }
  rounds_ += rounds;
  return mine_spans;
}

std::vector<Span> ShmTransport::reduce_scatter(const std::vector<Span>& spans, size_t count, DataType dt,
                                               ReduceOp op) {
  Header h{kHeaderMagic, static_cast<uint8_t>(Kind::kAllreduce), static_cast<uint8_t>(dt), static_cast<uint8_t>(op),
           1, -1, r_, count, c_.seq_, 0, window_bytes()};
  exchange(h);
  return allreduce_rounds(spans, count, dt, op, 1);
}

void ShmTransport::allgather_slices(const std::vector<Span>& spans, size_t count, DataType dt) {
  Header h{kHeaderMagic, static_cast<uint8_t>(Kind::kAllreduce), static_cast<uint8_t>(dt), 0, 2, -1, r_, count,
           c_.seq_, 0, window_bytes()};
  exchange(h);
  allreduce_rounds(spans, count, dt, ReduceOp::kSum, 2);
}

void ShmTransport::broadcast(void* data, size_t count, DataType dt, int root) {
  const size_t bytes = count * dtype_size(dt);
  const uint64_t seq = c_.seq_;
  const bool eager = bytes <= std::min(c_.tuning_.shm_eager_bytes, layout_.eager_bytes);
  const bool is_root = root == r_;
  if (eager && is_root && bytes) std::memcpy(eager_buf(r_, seq), data, bytes);
  Header h{kHeaderMagic, static_cast<uint8_t>(Kind::kBroadcast), static_cast<uint8_t>(dt), 0, 0, root, r_, count,
           seq, is_root ? bytes : 0, window_bytes()};
  exchange(h);
  if (root < 0 || root >= n_)
    throw InvalidArgument("broadcast root " + std::to_string(root) + " is outside [0, " + std::to_string(n_) + ")");
  if (eager) {
    if (!is_root && bytes) std::memcpy(data, eager_buf(root, seq), bytes);
    return;
  }
  const size_t win = window_bytes();
  const uint64_t rounds = (bytes + win - 1) / win, base = rounds_;
  for (uint64_t k = 0; k < rounds; ++k) {
    const size_t off = k * win, len = std::min(win, bytes - off);
    if (is_root) {
      if (k >= kSlots) wait_for(kGathered, base + k + 1 - kSlots, "broadcast");
      std::memcpy(slot(r_, base + k), static_cast<char*>(data) + off, len);
      post(kPublished, base + k + 1);
    } else {
      wait_for(kPublished, base + k + 1, "broadcast", root);
      std::memcpy(static_cast<char*>(data) + off, slot(root, base + k), len);
      post(kGathered, base + k + 1);
    }
  }
  rounds_ += rounds;
}

void ShmTransport::allgatherv(const void* in, size_t count, DataType dt, std::vector<uint8_t>& out,
                              std::vector<size_t>* counts_out) {
  const size_t es = dtype_size(dt);
  const size_t bytes = count * es;
  const uint64_t seq = c_.seq_;
  const size_t eager_max = std::min(c_.tuning_.shm_eager_bytes, layout_.eager_bytes);
  if (bytes <= eager_max && bytes) std::memcpy(eager_buf(r_, seq), in, bytes);
  Header h{kHeaderMagic, static_cast<uint8_t>(Kind::kAllgather), static_cast<uint8_t>(dt), 0, 0, -1, r_, count, seq,
           bytes, window_bytes()};
  std::vector<Header> all = exchange(h);
  std::vector<size_t> off(n_ + 1, 0);
  for (int p = 0; p < n_; ++p) off[p + 1] = off[p] + all[p].count * es;
  out.resize(off[n_]);
  if (bytes) std::memcpy(out.data() + off[r_], in, bytes);
  const size_t win = window_bytes();
  uint64_t rounds = 0;
  for (int p = 0; p < n_; ++p) {
    const size_t b = off[p + 1] - off[p];
    if (b <= eager_max) {
      if (p != r_ && b) std::memcpy(out.data() + off[p], eager_buf(p, seq), b);
    } else {
      rounds = std::max<uint64_t>(rounds, (b + win - 1) / win);
    }
  }
  // Contributions above the eager limit: every rank stages window k of its own in round k.
  const uint64_t base = rounds_;
  for (uint64_t k = 0; k < rounds; ++k) {
    if (k >= kSlots) wait_for(kGathered, base + k + 1 - kSlots, "allgather");
    if (bytes > eager_max && k * win < bytes)
      std::memcpy(slot(r_, base + k), static_cast<const char*>(in) + k * win, std::min(win, bytes - k * win));
    post(kPublished, base + k + 1);
    wait_for(kPublished, base + k + 1, "allgather");
    for (int p = 0; p < n_; ++p) {
      const size_t b = off[p + 1] - off[p];
      if (p == r_ || b <= eager_max || k * win >= b) continue;
      std::memcpy(out.data() + off[p] + k * win, slot(p, base + k), std::min(win, b - k * win));
    }
    post(kGathered, base + k + 1);
  }
  rounds_ += rounds;
  if (counts_out) {
    counts_out->resize(n_);
    for (int p = 0; p < n_; ++p) (*counts_out)[p] = all[p].count;
  }
}

void ShmTransport::barrier() {
  Header h{kHeaderMagic, static_cast<uint8_t>(Kind::kBarrier), 0, 0, 0, -1, r_, 0, c_.seq_, 0, window_bytes()};
  exchange(h);
}

}  // namespace edl::collective
