// The recursive-doubling combine of the sparse mesh (tcp_communicator.h, docs/collectives.md
// "Sparse mesh"): every rank starts with a message of its own and ends with the merge of all ranks'
// messages, after log2(p2) full-duplex exchanges with its hypercube partners (+2 with a fold).
//
// Fold (n not a power of two, p2 < n, rem = n - p2): every even rank r < 2*rem sends its message to
// r + 1, which sends it an empty frame at the same time (so that an idle rank r is woken when its
// partner starts: the engine joins a round when bytes arrive) and merges the two (r's first); the
// even rank then waits for the result. Doubling: at distance 1, 2, ..., p2/2 every virtual rank
// exchanges its message with its partner and merges the two, the lower block first: both hold the
// merge of the same aligned block of 2d virtual ranks afterwards, which always stands for a
// contiguous range of real ranks. Unfold: the odd rank sends the result to the even one.
// Messages travel as frames {magic "EDLR", reserved, length u64} + bytes; the receiver reads the
// frame first and checks the length against the limit before it allocates anything.
#include <cstring>
#include <limits>

#include "collective/agreement.h"
#include "collective/tcp_internal.h"
#include "edl/error.h"

namespace edl::collective {
namespace {

struct Frame {
  uint32_t magic;
  uint32_t reserved;
  uint64_t bytes;
};
static_assert(sizeof(Frame) == 16, "combine frame is 16 bytes");
constexpr uint32_t kFrameMagic = 0x52444c45u;  // "EDLR"

uint64_t times(uint64_t a, uint64_t b) {
  return b != 0 && a > std::numeric_limits<uint64_t>::max() / b ? std::numeric_limits<uint64_t>::max() : a * b;
}

}  // namespace

void TcpCommunicator::exchange_frames(int send_peer, const std::vector<uint8_t>* out, int recv_peer,
                                      std::vector<uint8_t>* in, uint64_t limit, const char* what) {
  std::vector<PeerQueues> q(size_);
  Frame fo{kFrameMagic, 0, out ? out->size() : 0}, fi{};
  if (send_peer >= 0) {
    std::vector<Span> s{Span{&fo, sizeof(fo)}};
    if (!out->empty()) s.push_back(Span{const_cast<uint8_t*>(out->data()), out->size()});
    q[send_peer].send.push_back(Xfer::of(std::move(s)));
  }
  if (recv_peer >= 0) q[recv_peer].recv.push_back(Xfer::of({Span{&fi, sizeof(fi)}}));
  run_queues(q, false, what);
  if (recv_peer >= 0) {
    if (fi.magic != kFrameMagic)
      throw CommError(std::string(what) + " on rank " + std::to_string(rank_) + ": rank " + std::to_string(recv_peer) +
                      " sent a corrupt combine frame (the byte streams are out of sync)" + peer_text(recv_peer));
    if (fi.bytes > limit)
      throw CommError(std::string(what) + " on rank " + std::to_string(rank_) + ": rank " + std::to_string(recv_peer) +
                      " announces a message of " + std::to_string(fi.bytes) + " bytes, more than the " +
                      std::to_string(limit) + " its ranks may send (max_gather_bytes): refusing to allocate or wait for it" +
                      peer_text(recv_peer));
    in->resize(fi.bytes);
    if (fi.bytes > 0) q[recv_peer].recv.push_back(Xfer::of({Span{in->data(), in->size()}}));
  }
  run_queues(q, true, what);
}

void TcpCommunicator::combine(std::vector<uint8_t>& msg, const Merge& merge, uint64_t rank_limit, const char* what) {
  const MeshTopology& t = topo_;
  const uint64_t all_limit = times(rank_limit, static_cast<uint64_t>(size_));
  std::vector<uint8_t>& in = combine_in_;
  if (t.folded_out()) {
    exchange_frames(rank_ + 1, &msg, rank_ + 1, &in, 0, what);  // our message; its empty wake-up frame
    exchange_frames(-1, nullptr, rank_ + 1, &msg, all_limit, what);
  } else {
    if (t.folds_in()) {
      const std::vector<uint8_t> none;
      exchange_frames(rank_ - 1, &none, rank_ - 1, &in, rank_limit, what);
      merge(msg, in, false);
    }
    const int v = t.virtual_rank();
    for (int mask = 1; mask < t.p2(); mask <<= 1) {
      const int peer = t.real(v ^ mask);
      // The partner stands for `mask` virtual ranks, each at most two real ranks.
      exchange_frames(peer, &msg, peer, &in, times(rank_limit, 2 * static_cast<uint64_t>(mask)), what);
      merge(msg, in, (v & mask) == 0);
    }
    if (t.folds_in()) exchange_frames(rank_ - 1, &msg, -1, nullptr, 0, what);
  }
  if (in.capacity() > (size_t{16} << 20)) std::vector<uint8_t>().swap(in);
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.combines;
}

void TcpCommunicator::reduce_messages(std::vector<uint8_t>& msg, const Merge& merge, uint64_t rank_limit,
                                      const char* what) {
  check_usable();
  if (size_ == 1) return;
  guarded([&] {
    begin();
    combine(msg, merge, rank_limit, what);
    finish(false, false);
  });
}

void TcpCommunicator::agree(const Header& h) {
  std::vector<uint8_t> msg(sizeof(Agreement));
  write_agreement(msg, agreement_of(h));
  const char* what = kind_name(h.kind);
  combine(msg,
          agreement_merge(size_, rank_, what,
                          [&](std::vector<uint8_t>& mine, std::vector<uint8_t>& theirs, bool) {
                            if (theirs.size() != mine.size())
                              throw CommError(std::string(what) + " on rank " + std::to_string(rank_) +
                                              ": a partner that agrees sent a payload (the byte streams are out of sync)");
                          }),
          rank_limit(0), what);
  const Agreement a = read_agreement(msg);
  if (!agreed(a)) throw_disagreement(a, what, rank_);
}

uint64_t TcpCommunicator::rank_limit(uint64_t own_payload) const {
  // A rank that disagrees may send what its own collective sends: up to max_gather_bytes (an
  // allgather contribution) plus the counts; more is refused before anything is allocated.
  return sizeof(Agreement) + 64 + std::max<uint64_t>(own_payload, options_.max_gather_bytes);
}

}  // namespace edl::collective
