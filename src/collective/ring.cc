// Pipelined ring allreduce (reduce-scatter + allgather) over the logical concatenation of spans.
//
// The buffer is cut into `size` segments; every step moves one segment to the next rank in chunks of
// tuning.chunk_bytes. Send and receive run as two independent cursors over the 2(n-1) steps, so the
// allgather of a chunk starts as soon as its last reduction is done; the dependencies are:
//   send (s, c) needs receive (s-1, c) complete (that chunk was reduced / received into place);
//   an allgather receive (s, c) writes into memory that reduce-scatter step s-(n-1) sends, so it
//   waits until that chunk has left.
// Reduce-scatter chunks arrive in one chunk of scratch and are reduced straight into the spans.
#include <algorithm>
#include <cstring>

#include "collective/reduce.h"
#include "collective/span_index.h"
#include "collective/tcp_internal.h"

namespace edl::collective {
namespace {

struct Cursor {
  int step = 0;
  size_t chunk = 0;
  size_t done = 0;  // bytes of the current chunk
  bool past(int s, size_t c) const { return step > s || (step == s && chunk > c); }
};

}  // namespace

void TcpCommunicator::allreduce_windows(const std::vector<Span>& spans, size_t count, DataType dt, ReduceOp op,
                                        WindowAlgorithm algo) {
  // Large buffers run as consecutive allreduces over windows of max(window_bytes, n *
  // window_rank_bytes): the working set of one (its segments or halves, the socket buffers in
  // flight, the scratch) then stays in the caches (docs/collectives.md, "Ring windows").
  const size_t es = dtype_size(dt);
  const size_t window_bytes = std::max(tuning_.window_bytes, static_cast<size_t>(size_) * tuning_.window_rank_bytes);
  const size_t window = std::max<size_t>(1, window_bytes / es);
  if (count <= window + window / 2) return (this->*algo)(spans, count, dt, op);
  SpanIndex index(spans);
  for (size_t first = 0; first < count; first += window) {
    const size_t len = std::min(window, count - first);
    std::vector<Span> sub;
    index.for_each(first * es, len * es, [&](char* p, size_t take, size_t) { sub.push_back(Span{p, take}); });
    (this->*algo)(sub, len, dt, op);
  }
}

void TcpCommunicator::ring_window(const std::vector<Span>& spans, size_t count, DataType dt, ReduceOp op) {
  const int n = size_, r = rank_;
  const size_t es = dtype_size(dt);
  const int steps = 2 * (n - 1);
  std::vector<size_t> seg_off(n + 1, 0);
  for (int i = 0; i < n; ++i) seg_off[i + 1] = seg_off[i] + count / n + (static_cast<size_t>(i) < count % n ? 1 : 0);
  // At least ~4 chunks per segment so that the steps overlap, but chunks of at least 256 KiB (one
  // syscall moves a lot) and at most tuning.chunk_bytes.
  const size_t max_chunk = std::max<size_t>(1, tuning_.chunk_bytes / es);
  const size_t min_chunk = std::min(max_chunk, std::max<size_t>(1, (256u << 10) / es));
  const size_t chunk_elems = std::clamp((count / n + 3) / 4, min_chunk, max_chunk);
  auto mod = [n](int x) { return ((x % n) + n) % n; };
  auto send_seg = [&](int s) { return s < n - 1 ? mod(r - s) : mod(r + 1 - (s - (n - 1))); };
  auto recv_seg = [&](int s) { return s < n - 1 ? mod(r - s - 1) : mod(r - (s - (n - 1))); };
  auto nchunks = [&](int seg) { return (seg_off[seg + 1] - seg_off[seg] + chunk_elems - 1) / chunk_elems; };
  // Byte range [first, second) of chunk c of segment seg.
  auto chunk_range = [&](int seg, size_t c) {
    size_t b = seg_off[seg] + c * chunk_elems;
    size_t e = std::min(seg_off[seg + 1], b + chunk_elems);
    return std::pair<size_t, size_t>(b * es, (e - b) * es);
  };

  SpanIndex index(spans);
  if (scratch_.size() < chunk_elems * es) scratch_.resize(chunk_elems * es);
  const int next = mod(r + 1), prev = mod(r - 1);
  const int sfd = send_fd_[next], rfd = recv_fd_[prev];
  Cursor snd, rcv;
  Waiter w(*this, deadline_, "allreduce");
  uint64_t sent = 0;
  iovec iov[64];
  while (snd.step < steps || rcv.step < steps) {
    if (aborted_.load(std::memory_order_relaxed)) throw_aborted();
    bool progress = false;
    w.reset();
    while (snd.step < steps) {
      const int seg = send_seg(snd.step);
      if (snd.chunk >= nchunks(seg)) {
        ++snd.step, snd.chunk = 0, snd.done = 0;
        continue;
      }
      if (snd.done == 0 && snd.step > 0 && !rcv.past(snd.step - 1, snd.chunk)) break;
      auto [off, len] = chunk_range(seg, snd.chunk);
      int cnt = index.fill(off + snd.done, len - snd.done, iov, 64);
      IoResult res = try_sendv(sfd, iov, cnt);
      if (res.err) io_error(next, res.err, true, "allreduce");
      if (res.bytes == 0) {
        w.want(sfd, POLLOUT, next);
        break;
      }
      progress = true;
      sent += res.bytes;
      snd.done += res.bytes;
      if (snd.done == len) ++snd.chunk, snd.done = 0;
    }
    while (rcv.step < steps) {
      const int seg = recv_seg(rcv.step);
      if (rcv.chunk >= nchunks(seg)) {
        ++rcv.step, rcv.chunk = 0, rcv.done = 0;
        continue;
      }
      const bool reducing = rcv.step < n - 1;
      if (rcv.done == 0 && !reducing && !snd.past(rcv.step - (n - 1), rcv.chunk)) break;
      auto [off, len] = chunk_range(seg, rcv.chunk);
      int cnt;
      if (reducing) {
        iov[0] = iovec{scratch_.data() + rcv.done, len - rcv.done};
        cnt = 1;
      } else {
        cnt = index.fill(off + rcv.done, len - rcv.done, iov, 64);
      }
      IoResult res = try_recvv(rfd, iov, cnt);
      if (res.err) io_error(prev, res.err, false, "allreduce");
      if (res.bytes == 0) {
        w.want(rfd, POLLIN, prev);
        break;
      }
      progress = true;
      rcv.done += res.bytes;
      if (rcv.done == len) {
        if (reducing) {
          const bool last = rcv.step == n - 2;
          index.for_each(off, len, [&](char* p, size_t take, size_t rel) {
            reduce_inplace(p, scratch_.data() + rel, take / es, dt, op);
            if (last && op == ReduceOp::kAverage) divide_inplace(p, take / es, dt, n);
          });
        }
        ++rcv.chunk, rcv.done = 0;
      }
    }
    if (progress) {
      w.progressed();
    } else if (snd.step < steps || rcv.step < steps) {
      w.idle();
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.bytes_sent += sent;
}

}  // namespace edl::collective
