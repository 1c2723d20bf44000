// The collectives of TcpCommunicator: header exchange (with eager payload), mismatch detection,
// direct-exchange allreduce, broadcast, allgatherv and barrier. The ring allreduce is in ring.cc.
#include <algorithm>
#include <cstring>

#include "collective/hierarchy.h"
#include "collective/reduce.h"
#include "collective/shm_transport.h"
#include "collective/tcp_internal.h"
#include "edl/error.h"

namespace edl::collective {

int TcpCommunicator::Xfer::fill(iovec* iov, int max, void* sink, size_t sink_bytes) const {
  if (drain) {
    iov[0].iov_base = sink;
    iov[0].iov_len = std::min(remaining, sink_bytes);
    return remaining > 0 ? 1 : 0;
  }
  int n = 0;
  size_t o = off;
  for (size_t i = idx; i < spans.size() && n < max; ++i, o = 0) {
    if (spans[i].bytes == o) continue;
    iov[n].iov_base = static_cast<char*>(spans[i].data) + o;
    iov[n].iov_len = spans[i].bytes - o;
    ++n;
  }
  return n;
}

void TcpCommunicator::Xfer::advance(size_t n) {
  remaining -= n;
  if (drain) return;
  while (n > 0 || (idx < spans.size() && off == spans[idx].bytes)) {
    size_t len = spans[idx].bytes - off;
    if (n < len) {
      off += n;
      return;
    }
    n -= len;
    ++idx;
    off = 0;
  }
}

namespace {

template <typename Fn>
bool pump(XferQueue& q, int fd, bool sending, void* sink, size_t sink_bytes, Fn&& on_error, uint64_t* bytes_moved,
          uint64_t* messages) {
  bool progress = false;
  while (!q.empty()) {
    auto& x = q.front();
    if (x.remaining == 0) {
      q.pop_front();
      ++*messages;
      continue;
    }
    iovec iov[64];
    int n = x.fill(iov, 64, sink, sink_bytes);
    IoResult r = sending ? try_sendv(fd, iov, n) : try_recvv(fd, iov, n);
    if (r.err != 0) on_error(r.err);
    if (r.bytes == 0) break;
    progress = true;
    *bytes_moved += r.bytes;
    x.advance(r.bytes);
  }
  return progress;
}

}  // namespace

void TcpCommunicator::run_queues(std::vector<PeerQueues>& q, bool wait_sends, const char* what) {
  if (drain_buf_.empty()) drain_buf_.resize(64 << 10);
  Waiter w(*this, deadline_, what);
  uint64_t sent = 0, received = 0, messages = 0, ignored = 0;
  for (;;) {
    if (aborted_.load(std::memory_order_relaxed)) throw_aborted();
    bool progress = false, pending = false;
    w.reset();
    for (int p : topo_.peers()) {  // a queue to a peer that is not linked is never filled
      PeerQueues& pq = q[p];
      progress |= pump(pq.send, send_fd_[p], true, nullptr, 0, [&](int e) { io_error(p, e, true, what); }, &sent,
                       &messages);
      progress |= pump(pq.recv, recv_fd_[p], false, drain_buf_.data(), drain_buf_.size(),
                       [&](int e) { io_error(p, e, false, what); }, &received, &ignored);
      if (!pq.recv.empty()) {
        pending = true;
        w.want(recv_fd_[p], POLLIN, p);
      }
      if (!pq.send.empty()) {
        pending |= wait_sends;
        w.want(send_fd_[p], POLLOUT, p);
      }
    }
    if (!pending) break;
    if (progress) {
      w.progressed();
    } else {
      w.idle();
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.bytes_sent += sent;
  stats_.messages_sent += messages;
}

void TcpCommunicator::exchange_headers(Header& mine, const std::vector<Span>& payload, std::vector<Header>& all,
                                       std::vector<PeerQueues>& q) {
  all.assign(size_, Header{});
  all[rank_] = mine;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    std::vector<Span> s;
    s.reserve(1 + payload.size());
    s.push_back(Span{&mine, sizeof(Header)});
    if (mine.payload > 0) s.insert(s.end(), payload.begin(), payload.end());
    q[p].send.push_back(Xfer::of(std::move(s)));
    q[p].recv.push_back(Xfer::of({Span{&all[p], sizeof(Header)}}));
  }
  const char* what = kind_name(mine.kind);
  run_queues(q, false, what);
  for (int p = 0; p < size_; ++p) {
    std::string problem = header_problem(all[p], mine, p, options_.max_gather_bytes);
    if (!problem.empty())
      throw CommError(std::string(what) + " on rank " + std::to_string(rank_) + ": " + problem + peer_text(p));
  }
}

std::string TcpCommunicator::peer_text(int p) const {
  return p != rank_ && !peer_addr_[p].empty() ? " (peer " + peer_addr_[p] + ")" : "";
}

std::string TcpCommunicator::mismatch(const std::vector<Header>& all) const {
  for (int r = 1; r < size_; ++r) {
    std::string m = mismatch_text(all[0], all[r], r);
    if (!m.empty()) return m;
  }
  return "";
}

std::string TcpCommunicator::whole_mismatch(const std::vector<Header>& all) const {
  // A hierarchical cross-host step (hierarchy.h): `reserved` is the element count of the whole
  // buffer (the spans are a slice of it), or kHostMismatch from a host whose ranks disagreed.
  for (int r = 0; r < size_; ++r)
    if (all[r].reserved == kHostMismatch)
      return "allreduce mismatch among the ranks of host " + std::to_string(r) + " (hierarchical local step)";
  for (int r = 1; r < size_; ++r)
    if (all[r].reserved != all[0].reserved)
      return "allreduce count mismatch between hosts: host 0 has " + std::to_string(all[0].reserved) +
             " elements, host " + std::to_string(r) + " has " + std::to_string(all[r].reserved);
  return "";
}

void TcpCommunicator::drain_payloads(const std::vector<Header>& all, std::vector<PeerQueues>& q, const char* what) {
  for (int p = 0; p < size_; ++p)
    if (p != rank_ && all[p].payload > 0) q[p].recv.push_back(Xfer::drainer(all[p].payload));
  run_queues(q, true, what);
}

void TcpCommunicator::begin() {
  check_usable();
  deadline_ = std::min(Clock::now() + options_.timeout, outer_deadline_);
  ++seq_;
}

void TcpCommunicator::finish(bool eager, bool ring, bool halving_doubling) {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.collectives;
  if (eager) ++stats_.eager_allreduces;
  if (ring) ++stats_.ring_allreduces;
  if (halving_doubling) ++stats_.halving_doubling_allreduces;
}

AllreduceAlgorithm choose_allreduce(size_t bytes, int ranks, const AlgorithmTuning& t, bool one_host, bool sparse) {
  if (sparse) {
    // Recursive doubling sends the whole buffer once per round: ceil(log2 n) rounds, +1 with a fold.
    size_t rounds = 0;
    while ((size_t{1} << rounds) < static_cast<size_t>(ranks)) ++rounds;
    if (bytes <= t.eager_bytes && bytes * rounds <= t.direct_total_bytes) return AllreduceAlgorithm::kRecursiveDoubling;
  } else if (bytes <= t.eager_bytes && bytes * static_cast<size_t>(ranks - 1) <= t.direct_total_bytes) {
    return AllreduceAlgorithm::kDirect;
  }
  const bool power_of_two = (ranks & (ranks - 1)) == 0;
  const size_t hd_limit = ranks == 2      ? t.hd_max_bytes_2_ranks
                          : !power_of_two ? t.hd_max_bytes / 2
                          : one_host      ? t.hd_max_bytes_one_host
                                          : t.hd_max_bytes;
  if (ranks >= t.hd_min_ranks && bytes <= hd_limit) return AllreduceAlgorithm::kHalvingDoubling;
  return AllreduceAlgorithm::kRing;
}

const char* algorithm_name(AllreduceAlgorithm a) {
  switch (a) {
    case AllreduceAlgorithm::kDirect: return "direct";
    case AllreduceAlgorithm::kHalvingDoubling: return "halving-doubling";
    case AllreduceAlgorithm::kRing: return "ring";
    case AllreduceAlgorithm::kRecursiveDoubling: return "recursive-doubling";
  }
  return "?";
}

void TcpCommunicator::staged_allreduce(const std::vector<Span>& spans, size_t count, DataType dt, ReduceOp op,
                                       AllreduceAlgorithm a) {
  auto run = [&](const std::vector<Span>& s, DataType t) {
    allreduce_windows(s, count, t, op,
                      a == AllreduceAlgorithm::kHalvingDoubling ? &TcpCommunicator::halving_doubling
                                                                : &TcpCommunicator::ring_window);
  };
  if (!is_16bit_float(dt)) return run(spans, dt);
  with_float32(spans, count, dt, widened_, run);  // accumulate in float32 over the wire too
}


namespace {

void check_dtype(DataType dt) { (void)dtype_size(dt); }

void check_op(ReduceOp op) {
  if (static_cast<uint8_t>(op) > static_cast<uint8_t>(ReduceOp::kProduct))
    throw InvalidArgument("unknown ReduceOp value " + std::to_string(static_cast<int>(op)));
}

}  // namespace

void TcpCommunicator::allreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  check_dtype(dtype);
  EDL_CHECK(data != nullptr || count == 0, InvalidArgument, "allreduce: data is null but count is " + std::to_string(count));
  allreduce_spans({Span{data, count * dtype_size(dtype)}}, dtype, op);
}

void TcpCommunicator::allreduce_spans(const std::vector<Span>& spans, DataType dt, ReduceOp op, uint64_t whole_count) {
  const size_t es = dtype_size(dt);
  check_op(op);
  size_t bytes = 0;
  for (const Span& s : spans) {
    EDL_CHECK(s.bytes % es == 0, InvalidArgument,
              "allreduce: a buffer of " + std::to_string(s.bytes) + " bytes is not a whole number of " +
                  dtype_name(dt) + " elements");
    EDL_CHECK(s.data != nullptr || s.bytes == 0, InvalidArgument, "allreduce: null buffer");
    bytes += s.bytes;
  }
  const size_t count = bytes / es;
  check_usable();
  if (size_ == 1) return;  // sum/min/max/product/average of one contribution is the contribution
  if (shm_) {
    guarded([&] {
      begin();
      const bool eager = shm_->allreduce(spans, count, dt, op);
      finish(eager, !eager);
    });
    return;
  }
  if (hier_) {
    guarded([&] {
      begin();
      const bool sliced = hier_->allreduce(spans, count, dt, op, deadline_);
      finish(!sliced, sliced);
    });
    return;
  }
  if (sparse()) {
    guarded([&] {
      begin();
      sparse_allreduce(spans, count, dt, op, whole_count);
    });
    return;
  }
  guarded([&] {
    begin();
    const AllreduceAlgorithm algo = choose_allreduce(bytes, size_, tuning_, one_host_);
    const bool eager = algo == AllreduceAlgorithm::kDirect;
    Header h{kHeaderMagic, static_cast<uint8_t>(Kind::kAllreduce), static_cast<uint8_t>(dt), static_cast<uint8_t>(op),
             static_cast<uint8_t>(algo), -1, rank_, count, seq_, eager ? bytes : 0, whole_count};
    std::vector<PeerQueues> q(size_);
    std::vector<Header> all;
    exchange_headers(h, spans, all, q);
    std::string mm = whole_mismatch(all);
    if (mm.empty()) mm = mismatch(all);
    if (!mm.empty()) {
      drain_payloads(all, q, "allreduce");
      throw MismatchError(mm);
    }
    for (int p = 0; p < size_; ++p)
      if (all[p].payload != (eager ? bytes : 0) || all[p].pad != h.pad)
        throw CommError("allreduce on rank " + std::to_string(rank_) + ": rank " + std::to_string(p) + " chose " +
                        algorithm_name(static_cast<AllreduceAlgorithm>(all[p].pad)) + " with " +
                        std::to_string(all[p].payload) + " eager bytes where this rank chose " +
                        algorithm_name(algo) + " with " + std::to_string(eager ? bytes : 0) +
                        " (AlgorithmTuning differs between ranks?)" + peer_text(p));
    if (eager) {
      // Direct exchange: every rank has every contribution; reduce them in rank order.
      scratch_.resize(static_cast<size_t>(size_) * bytes);
      for (int p = 0; p < size_; ++p)
        if (p != rank_) q[p].recv.push_back(Xfer::of({Span{scratch_.data() + static_cast<size_t>(p) * bytes, bytes}}));
      run_queues(q, true, "allreduce");
      std::vector<const void*> contrib(size_);
      size_t off = 0;
      for (const Span& s : spans) {
        for (int p = 0; p < size_; ++p)
          contrib[p] = p == rank_ ? s.data : static_cast<const void*>(scratch_.data() + static_cast<size_t>(p) * bytes + off);
        reduce_ordered(s.data, contrib.data(), size_, s.bytes / es, dt, op, size_);
        off += s.bytes;
      }
    } else {
      run_queues(q, true, "allreduce");
      staged_allreduce(spans, count, dt, op, algo);
    }
    finish(eager, algo == AllreduceAlgorithm::kRing, algo == AllreduceAlgorithm::kHalvingDoubling);
  });
}

std::vector<Span> TcpCommunicator::shm_reduce_scatter(const std::vector<Span>& spans, DataType dt, ReduceOp op) {
  size_t bytes = 0;
  for (const Span& s : spans) bytes += s.bytes;
  check_usable();
  if (!shm_) throw InvalidArgument("shm_reduce_scatter: the communicator does not use shared memory");
  std::vector<Span> mine;
  guarded([&] {
    begin();
    mine = shm_->reduce_scatter(spans, bytes / dtype_size(dt), dt, op);
    finish(false, false);
  });
  return mine;
}

void TcpCommunicator::shm_allgather_slices(const std::vector<Span>& spans, DataType dt) {
  size_t bytes = 0;
  for (const Span& s : spans) bytes += s.bytes;
  check_usable();
  if (!shm_) throw InvalidArgument("shm_allgather_slices: the communicator does not use shared memory");
  guarded([&] {
    begin();
    shm_->allgather_slices(spans, bytes / dtype_size(dt), dt);
    finish(false, false);
  });
}

void TcpCommunicator::broadcast(void* data, size_t count, DataType dtype, int root) {
  check_dtype(dtype);
  EDL_CHECK(data != nullptr || count == 0, InvalidArgument, "broadcast: data is null but count is " + std::to_string(count));
  check_usable();
  if (size_ == 1) {
    EDL_CHECK(root == 0, InvalidArgument, "broadcast root " + std::to_string(root) + " is outside [0, 1)");
    return;
  }
  const size_t bytes = count * dtype_size(dtype);
  if (shm_) {
    guarded([&] {
      begin();
      shm_->broadcast(data, count, dtype, root);
      finish(false, false);
    });
    return;
  }
  if (sparse()) {
    guarded([&] {
      begin();
      sparse_broadcast(data, count, dtype, root);
    });
    return;
  }
  guarded([&] {
    begin();
    Header h{kHeaderMagic, static_cast<uint8_t>(Kind::kBroadcast), static_cast<uint8_t>(dtype), 0, 0, root, rank_,
             count, seq_, root == rank_ ? bytes : 0, 0};
    std::vector<PeerQueues> q(size_);
    std::vector<Header> all;
    exchange_headers(h, {Span{data, bytes}}, all, q);
    std::string mm = mismatch(all);
    if (!mm.empty()) {
      drain_payloads(all, q, "broadcast");
      throw MismatchError(mm);
    }
    if (root < 0 || root >= size_) {
      run_queues(q, true, "broadcast");
      throw InvalidArgument("broadcast root " + std::to_string(root) + " is outside [0, " + std::to_string(size_) + ")");
    }
    if (rank_ != root) q[root].recv.push_back(Xfer::of({Span{data, bytes}}));
    run_queues(q, true, "broadcast");
    finish(false, false);
  });
}

void TcpCommunicator::allgatherv(const void* in, size_t count, DataType dtype, std::vector<uint8_t>& out,
                                 std::vector<size_t>* counts_out) {
  check_dtype(dtype);
  EDL_CHECK(in != nullptr || count == 0, InvalidArgument, "allgather: input is null but count is " + std::to_string(count));
  const size_t es = dtype_size(dtype);
  const size_t bytes = count * es;
  check_usable();
  if (size_ == 1) {
    const uint8_t* p = static_cast<const uint8_t*>(in);
    out.assign(p, p + bytes);
    if (counts_out) counts_out->assign(1, count);
    return;
  }
  if (shm_) {
    guarded([&] {
      begin();
      shm_->allgatherv(in, count, dtype, out, counts_out);
      finish(false, false);
    });
    return;
  }
  if (sparse()) {
    guarded([&] {
      begin();
      sparse_allgatherv(in, count, dtype, out, counts_out);
    });
    return;
  }
  guarded([&] {
    begin();
    Header h{kHeaderMagic, static_cast<uint8_t>(Kind::kAllgather), static_cast<uint8_t>(dtype), 0, 0, -1, rank_,
             count, seq_, bytes, 0};
    std::vector<PeerQueues> q(size_);
    std::vector<Header> all;
    exchange_headers(h, {Span{const_cast<void*>(in), bytes}}, all, q);
    std::string mm = mismatch(all);
    if (!mm.empty()) {
      drain_payloads(all, q, "allgather");
      throw MismatchError(mm);
    }
    std::vector<size_t> off(size_ + 1, 0);
    for (int p = 0; p < size_; ++p) off[p + 1] = off[p] + all[p].count * es;
    out.resize(off[size_]);
    if (bytes) std::memcpy(out.data() + off[rank_], in, bytes);
    for (int p = 0; p < size_; ++p)
      if (p != rank_) q[p].recv.push_back(Xfer::of({Span{out.data() + off[p], all[p].count * es}}));
    run_queues(q, true, "allgather");
    if (counts_out) {
      counts_out->resize(size_);
      for (int p = 0; p < size_; ++p) (*counts_out)[p] = all[p].count;
    }
    finish(false, false);
  });
}

void TcpCommunicator::barrier() {
  check_usable();
  if (size_ == 1) return;
  if (shm_) {
    guarded([&] {
      begin();
      shm_->barrier();
      finish(false, false);
    });
    return;
  }
  if (sparse()) {
    guarded([&] {
      begin();
      sparse_barrier();
    });
    return;
  }
  guarded([&] {
    begin();
    Header h{kHeaderMagic, static_cast<uint8_t>(Kind::kBarrier), 0, 0, 0, -1, rank_, 0, seq_, 0, 0};
    std::vector<PeerQueues> q(size_);
    std::vector<Header> all;
    exchange_headers(h, {}, all, q);
    std::string mm = mismatch(all);
    if (!mm.empty()) {
      drain_payloads(all, q, "barrier");
      throw MismatchError(mm);
    }
    run_queues(q, true, "barrier");
    finish(false, false);
  });
}

}  // namespace edl::collective
