// ShmTransport: the collectives of a TcpCommunicator whose ranks all share one host, run through
// one shared-memory segment instead of the sockets (docs/collectives.md, "Shared-memory transport").
//
//  - The segment is a memfd created by rank 0 and passed to the other ranks over an abstract Unix
//    socket during construction (shm_setup.cc): it has no name in /dev/shm or anywhere else and
//    disappears with the last mapping, so nothing of a job outlives its processes (kill -9 included).
//  - Per rank: a control block (progress counters, one per cache line, and the collective header
//    by sequence parity), two eager buffers (by sequence parity) and two staging slots.
//  - A collective publishes its header (small payloads first: eager), waits for every rank's
//    header, checks them like the TCP path (same MismatchError on every rank), then moves large data
//    in rounds: every rank copies its contribution to the other ranks' slices into its staging slot,
//    reduces its own slice from all of them, and copies the others' reduced slices back
//    (reduce-scatter + allgather, double-buffered so rounds overlap).
//  - Waiting spins (bounded, like the TCP path), then blocks in poll() on the TCP mesh's receive
//    sockets and the abort eventfd after raising a "sleeping" flag; a rank that posts progress
//    sends one wake-up byte to each sleeping peer over the mesh. A peer's death is the EOF of its
//    socket (PeerLostError as fast as on TCP), abort() wakes the poll, the deadline bounds it.
//
// Thread-safety: as TcpCommunicator: one collective thread; wait_incoming() may run on another
// thread at the same time (the engine's idle wait next to a helper's round).
//
#pragma once

#include <cstddef>
#include <cstdint>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collective/tcp_internal.h"

namespace edl::collective {

// Geometry of the segment; rank 0 chooses it and writes it into the segment's header.
struct ShmLayout {
  int size = 0;
  size_t eager_bytes = 256 << 10;  // capacity of one eager buffer (per rank, per parity)
  size_t slot_bytes = 4 << 20;     // capacity of one staging slot (per rank; two slots)
  size_t ctl_offset = 0;
  size_t data_offset = 0;
  size_t rank_stride = 0;  // data bytes per rank
  size_t total = 0;

  static ShmLayout make(int size);
};

// First bytes of the segment.
struct ShmSegmentHeader {
  uint64_t magic;
  uint64_t generation;
  uint32_t size;
  uint32_t version;
  uint64_t eager_bytes;
  uint64_t slot_bytes;
  uint8_t nonce[32];
};
constexpr uint64_t kShmMagic = 0x314d48534c4445ull;  // "EDLSHM1"

class ShmTransport {
 public:
  // Takes over the mapping [base, base + layout.total).
  ShmTransport(TcpCommunicator& comm, void* base, const ShmLayout& layout);
  ~ShmTransport();
  ShmTransport(const ShmTransport&) = delete;
  ShmTransport& operator=(const ShmTransport&) = delete;

  // The collectives; called by TcpCommunicator inside guarded() after begin() (seq and deadline set).
  // Returns whether the payload went with the header (eager) rather than through staged rounds.
  bool allreduce(const std::vector<Span>& spans, size_t count, DataType dt, ReduceOp op);
  void broadcast(void* data, size_t count, DataType dt, int root);
  void allgatherv(const void* in, size_t count, DataType dt, std::vector<uint8_t>& out,
                  std::vector<size_t>* counts_out);
  void barrier();
  // The two halves of allreduce() for the hierarchical allreduce (hierarchy.h), over the same window
  // geometry: reduce_scatter leaves this rank's slice of every window reduced (in the spans) and
  // returns those slices; allgather then copies every other rank's slices into the spans. Both are
  // collectives of their own (header exchange, mismatch check; `op` unused by allgather).
  std::vector<Span> reduce_scatter(const std::vector<Span>& spans, size_t count, DataType dt, ReduceOp op);
  void allgather_slices(const std::vector<Span>& spans, size_t count, DataType dt);
  // TcpCommunicator::wait_incoming for this transport: a peer entered a later collective.
  bool wait_incoming(int extra_fd, Clock::time_point until);

 private:
  using Header = TcpCommunicator::Header;
  enum Counter { kEntered = 0, kPublished = 1, kReduced = 2, kGathered = 3, kSleeping = 4, kCounters = 5 };

  uint64_t* word(int rank, Counter c) const;
  Header* header_slot(int rank, uint64_t seq) const;
  uint8_t* eager_buf(int rank, uint64_t seq) const;
  uint8_t* slot(int rank, uint64_t round) const;
  uint64_t load(int rank, Counter c) const { return __atomic_load_n(word(rank, c), __ATOMIC_ACQUIRE); }

  // Stores this rank's counter and wakes peers that sleep.
  void post(Counter c, uint64_t value);
  // Waits until counter c of every peer (or only of `only`) is >= target.
  void wait_for(Counter c, uint64_t target, const char* what, int only = -1);
  bool ready(Counter c, uint64_t target, int only) const;
  // One blocking step: sleeping flag, poll() on the mesh sockets + abort eventfd, drain wake-ups.
  void block(Counter c, uint64_t target, const char* what, int only);
  void drain(int peer);
  [[noreturn]] void timeout(Counter c, uint64_t target, const char* what, int only) const;

  // Publishes `mine` (eager payload already in place), waits for all headers, validates them and
  // throws the common MismatchError. Returns every rank's header.
  std::vector<Header> exchange(const Header& mine);
  // Reduce-scatter + allgather in rounds (both halves, or only the first or second: `phases` bit 1 /
  // bit 2). Returns this rank's slices when the gather is left out.
  std::vector<Span> allreduce_rounds(const std::vector<Span>& spans, size_t count, DataType dt, ReduceOp op,
                                     int phases = 3);
  size_t window_bytes() const;

  TcpCommunicator& c_;
  void* base_;
  ShmLayout layout_;
  int n_, r_;
  uint64_t rounds_ = 0;  // staging rounds run so far (the same on every rank)
  // Per peer: 0 while its mesh socket is fine, -1 after EOF, else the errno (written under sleep_mu_).
  std::unique_ptr<std::atomic<int>[]> lost_;
  // Only one thread at a time sleeps on the mesh sockets (raises `sleeping`, drains wake-up bytes):
  // the engine thread may sit in wait_incoming() while a helper thread runs a collective. A
  // collective that must sleep takes the role (evicting wait_incoming through evict_fd_); a
  // wait_incoming() without it re-checks in short slices, so no wake-up byte is ever lost.
  std::mutex sleep_mu_;
  std::atomic<int> want_sleep_{0};  // collective threads waiting for sleep_mu_
  int evict_fd_ = -1;               // eventfd: asks the wait_incoming() holding sleep_mu_ to let go
};

}  // namespace edl::collective
