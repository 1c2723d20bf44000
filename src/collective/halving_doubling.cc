// Rabenseifner's allreduce (recursive-halving reduce-scatter + recursive-doubling allgather) over
// the logical concatenation of spans, for any number of ranks (docs/collectives.md, "Algorithms").
//
// Let p2 be the largest power of two <= n and rem = n - p2. Fold: of the first 2*rem ranks every
// even one sends its whole buffer to the odd one above it, which reduces it (in rank order) and
// takes part in the power-of-two algorithm as virtual rank r/2; the others are virtual rank r - rem.
// Halving: in step k (distance p2/2, p2/4, ..., 1) a virtual rank keeps the lower or upper half of
// its current block (by its bit), sends the other half to its partner and reduces the half it keeps
// (lower rank's data first, so both halves of the pair are reduced in the same order). After log2(p2)
// steps it owns a block of ~count/p2 elements, complete (kAverage divides it here). Doubling: the
// steps in reverse; each rank sends its block and receives its partner's straight into place.
// Unfold: the odd ranks send the result to the even rank below. Every element is reduced once, by
// its owner, and then copied, so all ranks hold bitwise identical results.
// 2 log2(p2) steps (+2 when n is not a power of two) against the ring's 2(n-1); the same bytes per
// rank as the ring when n is a power of two. Each step is one full-duplex exchange with one partner.
#include <algorithm>

#include "collective/reduce.h"
#include "collective/span_index.h"
#include "collective/tcp_internal.h"

namespace edl::collective {

void TcpCommunicator::halving_doubling(const std::vector<Span>& spans, size_t count, DataType dt, ReduceOp op) {
  const int n = size_, r = rank_;
  const size_t es = dtype_size(dt);
  int p2 = 1;
  while (p2 * 2 <= n) p2 *= 2;
  const int rem = n - p2;
  SpanIndex index(spans);
  auto range = [&](size_t first, size_t len) {
    std::vector<Span> v;
    index.for_each(first * es, len * es, [&](char* p, size_t take, size_t) { v.push_back(Span{p, take}); });
    return v;
  };
  // One full-duplex step with `peer`: send elements [sf, sf+sl), receive [rf, rf+rl) into scratch
  // (then reduce it into place: `mine_first` says whether this rank's data is the left operand) or
  // straight into place.
  auto step = [&](int peer, size_t sf, size_t sl, size_t rf, size_t rl, bool reduce, bool mine_first) {
    std::vector<PeerQueues> q(size_);
    if (sl) q[peer].send.push_back(Xfer::of(range(sf, sl)));
    if (rl) {
      if (reduce) {
        if (scratch_.size() < rl * es) scratch_.resize(rl * es);
        q[peer].recv.push_back(Xfer::of({Span{scratch_.data(), rl * es}}));
      } else {
        q[peer].recv.push_back(Xfer::of(range(rf, rl)));
      }
    }
    run_queues(q, true, "allreduce");
    if (!reduce || !rl) return;
    index.for_each(rf * es, rl * es, [&](char* p, size_t take, size_t rel) {
      const void* c[2] = {p, scratch_.data() + rel};
      if (!mine_first) std::swap(c[0], c[1]);
      reduce_ordered(p, c, 2, take / es, dt, op == ReduceOp::kAverage ? ReduceOp::kSum : op, 1);
    });
  };

  int vr;
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      step(r + 1, 0, count, 0, 0, false, true);
      vr = -1;
    } else {
      step(r - 1, 0, 0, 0, count, true, false);
      vr = r / 2;
    }
  } else {
    vr = r - rem;
  }
  auto real = [rem](int v) { return v < rem ? 2 * v + 1 : v + rem; };
  if (vr >= 0) {
    struct Level {
      int peer;
      size_t keep_first, keep_len, give_first, give_len;
    };
    std::vector<Level> levels;
    size_t lo = 0, hi = count;
    for (int mask = p2 / 2; mask >= 1; mask /= 2) {
      const int peer = real(vr ^ mask);
      const size_t mid = lo + (hi - lo) / 2;
      const bool low = (vr & mask) == 0;
      Level l{peer, low ? lo : mid, low ? mid - lo : hi - mid, low ? mid : lo, low ? hi - mid : mid - lo};
      step(peer, l.give_first, l.give_len, l.keep_first, l.keep_len, true, low);
      levels.push_back(l);
      lo = l.keep_first;
      hi = l.keep_first + l.keep_len;
    }
    if (op == ReduceOp::kAverage)
      index.for_each(lo * es, (hi - lo) * es, [&](char* p, size_t take, size_t) { divide_inplace(p, take / es, dt, n); });
    for (auto it = levels.rbegin(); it != levels.rend(); ++it)
      step(it->peer, it->keep_first, it->keep_len, it->give_first, it->give_len, false, true);
  }
  if (r < 2 * rem) {
    if (r % 2 == 1) {
      step(r - 1, 0, count, 0, 0, false, true);
    } else {
      step(r + 1, 0, 0, 0, count, false, true);
    }
  }
  if (scratch_.capacity() > (size_t{64} << 20)) std::vector<uint8_t>().swap(scratch_);
}

}  // namespace edl::collective
