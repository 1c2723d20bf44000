// The collectives of TcpCommunicator on the sparse mesh (docs/collectives.md, "Sparse mesh"): every
// one starts with a recursive-doubling combine (combine.cc) of the agreement (agreement.h), which
// carries the data itself where that is the cheaper way:
//   allreduce   small: recursive doubling of agreement + buffer (each merge reduces, lower ranks
//               first, so every rank computes the same tree of reductions: bitwise identical
//               results); large: the agreement alone, then halving-doubling or the ring (their
//               partners are the mesh's hypercube and ring neighbours);
//   broadcast   small: the root's buffer rides in its message and reaches one more block of ranks at
//               every step (a binomial tree); large: the agreement, then a scatter down the binomial
//               tree and a recursive-doubling allgather (the root sends each byte about twice, not
//               log2(n) times, and no socket carries more than half the buffer);
//   allgatherv  every message carries the counts and the data of the ranks it stands for (merges
//               concatenate them in rank order);
//   barrier     the agreement alone.
// Disagreeing ranks all throw the same MismatchError after the combine (the streams stay in sync:
// every message is framed); a contribution above max_gather_bytes is reported by every rank.
#include <algorithm>
#include <cstring>

#include "collective/agreement.h"
#include "collective/reduce.h"
#include "collective/tcp_internal.h"
#include "edl/error.h"

namespace edl::collective {
namespace {

constexpr size_t kA = sizeof(Agreement);

}  // namespace

void TcpCommunicator::sparse_allreduce(const std::vector<Span>& spans, size_t count, DataType dt, ReduceOp op,
                                       uint64_t whole_count) {
  size_t bytes = 0;
  for (const Span& s : spans) bytes += s.bytes;
  const AllreduceAlgorithm algo = choose_allreduce(bytes, size_, tuning_, one_host_, true);
  const Header h{kHeaderMagic, static_cast<uint8_t>(Kind::kAllreduce), static_cast<uint8_t>(dt),
                 static_cast<uint8_t>(op), static_cast<uint8_t>(algo), -1, rank_, count, seq_, 0, whole_count};
  if (algo == AllreduceAlgorithm::kRecursiveDoubling) {
    recursive_doubling(spans, count, dt, op, h);
  } else {
    agree(h);
    staged_allreduce(spans, count, dt, op, algo);
  }
  finish(false, algo == AllreduceAlgorithm::kRing, algo == AllreduceAlgorithm::kHalvingDoubling);
  if (algo == AllreduceAlgorithm::kRecursiveDoubling) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.recursive_doubling_allreduces;
  }
}

void TcpCommunicator::recursive_doubling(const std::vector<Span>& spans, size_t count, DataType dt, ReduceOp op,
                                         const Header& h) {
  // 16-bit floats travel and accumulate as float32 and are rounded once at the end.
  const bool wide = is_16bit_float(dt);
  const DataType wt = wide ? DataType::kFloat32 : dt;
  const size_t es = dtype_size(dt), wes = dtype_size(wt);
  std::vector<uint8_t> msg(kA + count * wes);
  write_agreement(msg, agreement_of(h));
  size_t at = kA;
  for (const Span& s : spans) {
    if (wide) widen_to_float(s.data, reinterpret_cast<float*>(msg.data() + at), s.bytes / es, dt);
    else if (s.bytes) std::memcpy(msg.data() + at, s.data, s.bytes);
    at += s.bytes / es * wes;
  }
  const ReduceOp rop = op == ReduceOp::kAverage ? ReduceOp::kSum : op;
  const size_t payload = count * wes;
  combine(msg,
          agreement_merge(size_, rank_, "allreduce",
                         [&](std::vector<uint8_t>& mine, std::vector<uint8_t>& theirs, bool mine_lower) {
                           if (theirs.size() != mine.size())
                             throw CommError("allreduce on rank " + std::to_string(rank_) + ": a partner sent " +
                                             std::to_string(theirs.size() - kA) + " payload bytes for " +
                                             std::to_string(payload) + " (the byte streams are out of sync)");
                           const void* c[2] = {mine.data() + kA, theirs.data() + kA};
                           if (!mine_lower) std::swap(c[0], c[1]);
                           reduce_ordered(mine.data() + kA, c, 2, count, wt, rop, 1);
                         }),
          rank_limit(payload), "allreduce");
  const Agreement a = read_agreement(msg);
  if (!agreed(a)) throw_disagreement(a, "allreduce", rank_);
  if (op == ReduceOp::kAverage) divide_inplace(msg.data() + kA, count, wt, size_);
  at = kA;
  for (const Span& s : spans) {
    if (wide) narrow_from_float(reinterpret_cast<const float*>(msg.data() + at), s.data, s.bytes / es, dt);
    else if (s.bytes) std::memcpy(s.data, msg.data() + at, s.bytes);
    at += s.bytes / es * wes;
  }
}

void TcpCommunicator::sparse_broadcast(void* data, size_t count, DataType dt, int root) {
  const size_t es = dtype_size(dt), bytes = count * es;
  const Header h{kHeaderMagic, static_cast<uint8_t>(Kind::kBroadcast), static_cast<uint8_t>(dt), 0, 0, root, rank_,
                 count, seq_, 0, 0};
  auto check_root = [&] {
    if (root < 0 || root >= size_)
      throw InvalidArgument("broadcast root " + std::to_string(root) + " is outside [0, " + std::to_string(size_) + ")");
  };
  if (bytes > tuning_.eager_bytes) {
    agree(h);
    check_root();
    scatter_allgather_broadcast(data, bytes, root, es);
    finish(false, false);
    return;
  }
  std::vector<uint8_t> msg(kA + (rank_ == root ? bytes : 0));
  write_agreement(msg, agreement_of(h));
  if (rank_ == root && bytes) std::memcpy(msg.data() + kA, data, bytes);
  combine(msg,
          agreement_merge(size_, rank_, "broadcast",
                         [&](std::vector<uint8_t>& mine, std::vector<uint8_t>& theirs, bool) {
                           if (mine.size() > kA && theirs.size() > kA)
                             throw CommError("broadcast on rank " + std::to_string(rank_) +
                                             ": two partners both sent the root's data (the byte streams are out of sync)");
                           if (theirs.size() <= kA) return;
                           const Agreement merged = read_agreement(mine);
                           mine.swap(theirs);
                           write_agreement(mine, merged);
                         }),
          rank_limit(bytes), "broadcast");
  const Agreement a = read_agreement(msg);
  if (!agreed(a)) throw_disagreement(a, "broadcast", rank_);
  check_root();
  if (rank_ != root) {
    if (msg.size() != kA + bytes)
      throw CommError("broadcast on rank " + std::to_string(rank_) + ": received " + std::to_string(msg.size() - kA) +
                      " bytes of the root's data, expected " + std::to_string(bytes));
    if (bytes) std::memcpy(data, msg.data() + kA, bytes);
  }
  finish(false, false);
}

void TcpCommunicator::scatter_allgather_broadcast(void* data, size_t bytes, int root, size_t es) {
  const MeshTopology& t = topo_;
  const int p2 = t.p2();
  const size_t count = bytes / es;
  char* base = static_cast<char*>(data);
  // Segment i of p2 (by relabelled virtual rank): its first byte.
  auto off = [&](int i) { return (count / p2 * i + std::min<size_t>(i, count % p2)) * es; };
  auto step = [&](int to, size_t so, size_t sl, int from, size_t ro, size_t rl) {
    std::vector<PeerQueues> q(size_);
    if (to >= 0 && sl) q[to].send.push_back(Xfer::of({Span{base + so, sl}}));
    if (from >= 0 && rl) q[from].recv.push_back(Xfer::of({Span{base + ro, rl}}));
    run_queues(q, true, "broadcast");
  };
  int vroot = t.vrank_of(root);
  if (vroot < 0) {  // a folded-out root hands the buffer to its partner first
    if (rank_ == root) step(root + 1, 0, bytes, -1, 0, 0);
    if (rank_ == root + 1) step(-1, 0, 0, root, 0, bytes);
    vroot = t.vrank_of(root + 1);
  }
  const int v = t.virtual_rank();
  if (v >= 0) {
    const int u = v ^ vroot;  // 0 at the root
    for (int mask = p2 / 2; mask >= 1; mask /= 2) {  // scatter down the binomial tree
      const int low = u & (2 * mask - 1), peer = t.real(v ^ mask);
      if (low == 0) step(peer, off(u + mask), off(u + 2 * mask) - off(u + mask), -1, 0, 0);
      else if (low == mask) step(-1, 0, 0, peer, off(u), off(u + mask) - off(u));
    }
    for (int mask = 1; mask < p2; mask <<= 1) {  // recursive-doubling allgather
      const int mine = u & ~(mask - 1), theirs = (u ^ mask) & ~(mask - 1), peer = t.real(v ^ mask);
      step(peer, off(mine), off(mine + mask) - off(mine), peer, off(theirs), off(theirs + mask) - off(theirs));
    }
  }
  if (t.folds_in() && rank_ - 1 != root) step(rank_ - 1, 0, bytes, -1, 0, 0);
  if (t.folded_out() && rank_ != root) step(-1, 0, 0, rank_ + 1, 0, bytes);
}

void TcpCommunicator::sparse_allgatherv(const void* in, size_t count, DataType dt, std::vector<uint8_t>& out,
                                        std::vector<size_t>* counts_out) {
  // Message: agreement | u32 ranks | u32 oversize | u64 count per rank | data (absent once any
  // count is above max_gather_bytes: then only the counts travel, and every rank reports it).
  constexpr size_t kPre = kA + 8;
  const size_t es = dtype_size(dt), bytes = count * es;
  const uint64_t cap = options_.max_gather_bytes;
  const Header h{kHeaderMagic, static_cast<uint8_t>(Kind::kAllgather), static_cast<uint8_t>(dt), 0, 0, -1, rank_,
                 count, seq_, 0, 0};
  const bool over = bytes > cap;
  std::vector<uint8_t> msg(kPre + 8 + (over ? 0 : bytes));
  write_agreement(msg, agreement_of(h));
  const uint32_t one = 1, flag = over ? 1 : 0;
  const uint64_t c64 = count;
  std::memcpy(msg.data() + kA, &one, 4);
  std::memcpy(msg.data() + kA + 4, &flag, 4);
  std::memcpy(msg.data() + kPre, &c64, 8);
  if (!over && bytes) std::memcpy(msg.data() + kPre + 8, in, bytes);
  const std::string where = "allgather on rank " + std::to_string(rank_) + ": ";
  auto parse = [&](const std::vector<uint8_t>& m, uint32_t* ranks, uint32_t* oversize, uint64_t* data_bytes) {
    if (m.size() < kPre) throw CommError(where + "a partner's message is malformed (the byte streams are out of sync)");
    std::memcpy(ranks, m.data() + kA, 4);
    std::memcpy(oversize, m.data() + kA + 4, 4);
    if (*ranks == 0 || *ranks > static_cast<uint32_t>(size_) || m.size() < kPre + 8ull * *ranks)
      throw CommError(where + "a partner's message is malformed (the byte streams are out of sync)");
    uint64_t total = 0;
    for (uint32_t i = 0; i < *ranks; ++i) {
      uint64_t c;
      std::memcpy(&c, m.data() + kPre + 8 * i, 8);
      if (c > cap / es) *oversize = 1;
      else total += c * es;
    }
    *data_bytes = *oversize ? 0 : total;
    if (m.size() != kPre + 8ull * *ranks + *data_bytes)
      throw CommError(where + "a partner's message has " + std::to_string(m.size()) + " bytes, its counts say " +
                      std::to_string(kPre + 8ull * *ranks + *data_bytes) + " (the byte streams are out of sync)");
  };
  combine(msg,
          agreement_merge(size_, rank_, "allgather",
                         [&](std::vector<uint8_t>& mine, std::vector<uint8_t>& theirs, bool mine_lower) {
                           uint32_t rm, om, rt, ot;
                           uint64_t dm, dtb;
                           parse(mine, &rm, &om, &dm);
                           parse(theirs, &rt, &ot, &dtb);
                           const std::vector<uint8_t>& lo = mine_lower ? mine : theirs;
                           const std::vector<uint8_t>& hi = mine_lower ? theirs : mine;
                           const uint32_t rl = mine_lower ? rm : rt, rh = mine_lower ? rt : rm;
                           const uint32_t ranks = rl + rh, oversize = (om || ot) ? 1 : 0;
                           std::vector<uint8_t> m(kPre + 8ull * ranks + (oversize ? 0 : dm + dtb));
                           std::memcpy(m.data(), mine.data(), kA);  // the merged agreement
                           std::memcpy(m.data() + kA, &ranks, 4);
                           std::memcpy(m.data() + kA + 4, &oversize, 4);
                           std::memcpy(m.data() + kPre, lo.data() + kPre, 8ull * rl);
                           std::memcpy(m.data() + kPre + 8ull * rl, hi.data() + kPre, 8ull * rh);
                           if (!oversize) {
                             const size_t dl = lo.size() - kPre - 8ull * rl, dh = hi.size() - kPre - 8ull * rh;
                             if (dl) std::memcpy(m.data() + kPre + 8ull * ranks, lo.data() + kPre + 8ull * rl, dl);
                             if (dh) std::memcpy(m.data() + kPre + 8ull * ranks + dl, hi.data() + kPre + 8ull * rh, dh);
                           }
                           mine.swap(m);
                         }),
          rank_limit(8 + 8 + cap), "allgather");
  const Agreement a = read_agreement(msg);
  if (!agreed(a)) throw_disagreement(a, "allgather", rank_);
  uint32_t ranks, oversize;
  uint64_t data_bytes;
  parse(msg, &ranks, &oversize, &data_bytes);
  if (ranks != static_cast<uint32_t>(size_))
    throw CommError(where + "the combine gathered " + std::to_string(ranks) + " contributions for " +
                    std::to_string(size_) + " ranks");
  std::vector<uint64_t> counts(size_);
  std::memcpy(counts.data(), msg.data() + kPre, 8ull * size_);
  for (int r = 0; r < size_; ++r)
    if (counts[r] > cap / es)
      throw CommError(where + "rank " + std::to_string(r) + "'s allgather header announces " +
                      (counts[r] > UINT64_MAX / es ? std::to_string(counts[r]) + " x " + std::to_string(es)
                                                    : std::to_string(counts[r] * es)) + " bytes, more than max_gather_bytes (" + std::to_string(cap) +
                      "): refusing to allocate or wait for it");
  out.assign(msg.begin() + static_cast<long>(kPre + 8ull * size_), msg.end());
  if (counts_out) counts_out->assign(counts.begin(), counts.end());
  finish(false, false);
}

void TcpCommunicator::sparse_barrier() {
  agree(Header{kHeaderMagic, static_cast<uint8_t>(Kind::kBarrier), 0, 0, 0, -1, rank_, 0, seq_, 0, 0});
  finish(false, false);
}

}  // namespace edl::collective
