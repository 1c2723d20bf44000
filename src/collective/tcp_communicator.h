// TcpCommunicator: EDL's own TCP transport and collective algorithms (the Communicator behind
// Communicator::create). Design and wire protocol: docs/collectives.md.
//
//  - Full mesh of one-way sockets: for every peer, one connection this rank sends on (it connected
//    it) and one it receives on (it accepted it), bootstrapped through the store with a handshake
//    that proves the job secret both ways (mesh_handshake.h); connections of other jobs or
//    generations, ranks outside this generation and wrong secrets are refused.
//  - Every collective starts with a 48-byte header sent to every peer; small payloads ride in the
//    same message (eager). Every length in a peer's header is checked against this rank's own call
//    (or options.max_gather_bytes for allgather) before anything is allocated. All ranks see all headers, so all of them detect a mismatch identically
//    and throw the same MismatchError after draining what was sent (the streams stay in sync).
//  - Non-blocking sockets; waits spin briefly, then poll() on the sockets plus an eventfd that
//    abort() signals. Every collective has the deadline options.timeout.
//  - Any transport error, deadline or abort poisons the communicator: later calls rethrow the
//    first error, and the sockets are shut down so peers waiting on this rank fail promptly.
//  - When every rank is on one host (Transport kShm / kAuto, see communicator.h), the collectives
//    run through a shared-memory segment instead (shm_transport.h); the mesh then only carries
//    wake-up bytes and reports a dead peer by EOF.
//
// Thread-safety: collectives from one thread at a time; abort()/aborted()/stats() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collective/socket.h"
#include "edl/communicator.h"

namespace edl::collective {

// A contiguous piece of a logical buffer (fused allreduce: one per tensor). Non-owning.
struct Span {
  void* data;
  size_t bytes;
};

// Tunables of the algorithms (defaults are what the benchmarks in docs/collectives.md measured).
struct AlgorithmTuning {
  // Allreduce algorithm of the TCP path by size and ranks (choose_allreduce; crossover points measured
  // in docs/collectives.md, "Algorithms"):
  size_t eager_bytes = 256 << 10;        // direct exchange (payload with the header) up to this size ...
  size_t direct_total_bytes = 768 << 10;  // ... while every rank sends at most this much (bytes * (n-1))
  size_t hd_max_bytes = 4 << 20;         // otherwise halving-doubling up to this size at 3+ ranks (half of it
                                         // when the rank count is not a power of two: the fold moves the buffer
                                         // twice more) ...
  size_t hd_max_bytes_2_ranks = SIZE_MAX;  // ... and up to this size at 2 ranks (every size: two exchanges of
                                           // halves, the ring's bytes without its chunk dependencies) ...
  size_t hd_max_bytes_one_host = SIZE_MAX;  // ... and at a power-of-two rank count when every rank listens on a
                                            // loopback address (one host: no link is shared unevenly) ...
  int hd_min_ranks = 2;                  // ... at this many ranks or more; else the ring
  size_t chunk_bytes = 2 << 20;        // largest ring pipelining unit
  // Larger allreduces run as consecutive rings over windows of max(window_bytes, ranks *
  // window_rank_bytes): the working set of one ring then stays in the caches (measured on loopback
  // at 2 and 4 ranks: 1 MiB windows beat 16 MiB ones by 1.2-1.8x from 8 MiB up); the per-rank floor
  // keeps each ring step's segment at >= 256 KiB at many ranks, where a step's latency would dominate.
  size_t window_bytes = 1 << 20;
  size_t window_rank_bytes = 256 << 10;
  std::chrono::microseconds spin{50};  // busy-poll this long without progress before blocking in poll()
  // Shared-memory transport (shm_transport.h); both must be equal on all ranks (checked).
  size_t shm_eager_bytes = 64 << 10;   // payloads up to this go with the header (capped by the segment: 256 KiB)
  size_t shm_chunk_bytes = 1 << 20;    // bytes of the buffer per staging round (capped by the segment: 2 MiB)
  // Hierarchical allreduce (hierarchy.h): buffers of at least this many bytes are sliced across the
  // local ranks for the cross-host step (smaller ones: every local rank sends the whole buffer).
  size_t hier_slice_bytes = 64 << 10;
};

// The allreduce algorithms of the TCP path (docs/collectives.md, "Algorithms", with the measured
// crossover points). Every rank picks from (bytes, ranks, tuning); the choice travels in the header
// and ranks whose choices differ fail with CommError (their tunings differ).
enum class AllreduceAlgorithm : uint8_t { kDirect = 0, kHalvingDoubling = 1, kRing = 2 };
// `one_host`: every rank's published address is a loopback one (TcpCommunicator::one_host()).
EDL_API AllreduceAlgorithm choose_allreduce(size_t bytes, int ranks, const AlgorithmTuning& t, bool one_host = false);
EDL_API const char* algorithm_name(AllreduceAlgorithm a);

struct CommStats {
  uint64_t collectives = 0;
  uint64_t eager_allreduces = 0;
  uint64_t ring_allreduces = 0;
  uint64_t halving_doubling_allreduces = 0;
  uint64_t bytes_sent = 0;
};

class ShmTransport;
class Hierarchy;

// "auto" | "tcp" | "shm" (Config::transport, already validated) as a Transport.
inline Transport transport_from_name(const std::string& s) {
  return s == "tcp" ? Transport::kTcp : s == "shm" ? Transport::kShm : Transport::kAuto;
}
// "auto" | "0" | "1" (Config::hierarchical, already validated) as a Hierarchical.
inline Hierarchical hierarchical_from_name(const std::string& s) {
  return s == "0" ? Hierarchical::kOff : s == "1" ? Hierarchical::kOn : Hierarchical::kAuto;
}

class EDL_API TcpCommunicator final : public Communicator {
 public:
  static std::shared_ptr<TcpCommunicator> connect(std::shared_ptr<Store> store, const std::string& prefix, int rank,
                                                  int size, const CommunicatorOptions& options);
  TcpCommunicator(int rank, int size, const CommunicatorOptions& options);
  ~TcpCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  uint64_t generation() const override { return options_.generation; }

  void allreduce(void* data, size_t count, DataType dtype, ReduceOp op) override;
  // Allreduce of the concatenation of spans (each a whole number of elements), reading from and
  // writing to the spans directly: the fused allreduce of the engine without a copy.
  // `whole_count` (internal, the hierarchical cross-host step): the element count of the whole
  // buffer of which the spans are a slice; ranks whose whole counts differ get MismatchError.
  void allreduce_spans(const std::vector<Span>& spans, DataType dtype, ReduceOp op, uint64_t whole_count = 0);
  void broadcast(void* data, size_t count, DataType dtype, int root) override;
  void allgatherv(const void* in, size_t count, DataType dtype, std::vector<uint8_t>& out,
                  std::vector<size_t>* counts_out = nullptr) override;
  void barrier() override;
  void abort(const std::string& reason) override;
  bool aborted() const override;

  // Blocks until a peer has sent this rank something (the first bytes of its next collective: every
  // collective starts by sending a header to every peer), a connection failed, the communicator
  // was aborted (all three: true, the next collective reports it), `extra_fd` became readable (it
  // is drained; false) or `until` passed (false). Reads nothing from the connections (on shared
  // memory: only wake-up bytes). The collective engine waits here between rounds instead of
  // ticking (docs/collectives.md). May run while another thread runs a collective.
  bool wait_incoming(int extra_fd, Clock::time_point until);

  void set_tuning(const AlgorithmTuning& t);  // also of the hierarchical children
  // The halves of the shared-memory allreduce, for the hierarchical allreduce's local steps
  // (hierarchy.h; only when transport_name() is "shm"): the first leaves this rank's slices reduced
  // and returns them, the second gathers the other ranks' slices. Same error contract as allreduce.
  std::vector<Span> shm_reduce_scatter(const std::vector<Span>& spans, DataType dt, ReduceOp op);
  void shm_allgather_slices(const std::vector<Span>& spans, DataType dt);
  const AlgorithmTuning& tuning() const { return tuning_; }
  // Every rank of the mesh listens on a loopback address, so all run on this host (the algorithm
  // choice: halving-doubling at every size, docs/collectives.md "Algorithms"); same on every rank.
  bool one_host() const { return one_host_; }
  CommStats stats() const;
  // "shm" when the collectives run through shared memory (Transport kShm / kAuto on one host), "hier"
  // when the allreduce is hierarchical (hierarchy.h; the other collectives then run over TCP), else "tcp".
  const char* transport_name() const { return shm_ ? "shm" : hier_ ? "hier" : "tcp"; }
  // The hierarchical allreduce's state when transport_name() is "hier", else null (tests, diagnostics).
  const Hierarchy* hierarchy() const { return hier_.get(); }

  // Implementation types (tcp_internal.h).
  struct Header;
  struct Xfer;
  struct PeerQueues;
  struct Waiter;

 private:
  friend class MeshBuilder;  // mesh_bootstrap.cc
  friend class ShmTransport;  // shm_transport.cc
  friend class ShmSetup;      // shm_setup.cc
  friend class Hierarchy;     // hierarchy.cc
  void build_mesh(Store& store, const std::string& prefix);
  // After the mesh: agree on the transport with the peers and attach the shared segment, or build
  // the hierarchical children through the store (shm_setup.cc).
  void setup_transport(const std::shared_ptr<Store>& store, const std::string& prefix);
  std::string peer_text(int peer) const;  // " (peer host:port)" for messages
  void check_usable() const;
  [[noreturn]] void fail(std::exception_ptr e);
  [[noreturn]] void throw_aborted() const;
  [[noreturn]] void io_error(int peer, int err, bool sending, const char* what) const;
  template <typename Fn>
  void guarded(Fn&& fn);

  // One collective, header first (see collectives.cc).
  void begin();
  void finish(bool eager, bool ring, bool halving_doubling = false);
  void exchange_headers(Header& mine, const std::vector<Span>& payload, std::vector<Header>& all,
                        std::vector<PeerQueues>& q);
  std::string mismatch(const std::vector<Header>& all) const;
  std::string whole_mismatch(const std::vector<Header>& all) const;
  void drain_payloads(const std::vector<Header>& all, std::vector<PeerQueues>& q, const char* what);
  void run_queues(std::vector<PeerQueues>& q, bool wait_sends, const char* what);
  // Runs `algo` (ring_window or halving_doubling) over consecutive windows of the spans (ring.cc).
  using WindowAlgorithm = void (TcpCommunicator::*)(const std::vector<Span>&, size_t, DataType, ReduceOp);
  void allreduce_windows(const std::vector<Span>& spans, size_t count, DataType dt, ReduceOp op, WindowAlgorithm algo);
  void ring_window(const std::vector<Span>& spans, size_t count, DataType dt, ReduceOp op);
  void halving_doubling(const std::vector<Span>& spans, size_t count, DataType dt, ReduceOp op);  // halving_doubling.cc
  // The non-eager allreduce after the header exchange: 16-bit widening, then the chosen algorithm.
  void staged_allreduce(const std::vector<Span>& spans, size_t count, DataType dt, ReduceOp op, AllreduceAlgorithm a);
  void shutdown_sockets();

  int rank_;
  int size_;
  CommunicatorOptions options_;
  AlgorithmTuning tuning_;
  bool one_host_ = false;
  std::vector<int> send_fd_;  // per peer (own rank: -1)
  std::vector<int> recv_fd_;
  std::vector<std::string> peer_addr_;  // published address of each peer (messages)
  int event_fd_ = -1;
  uint64_t seq_ = 0;
  Clock::time_point deadline_;  // of the collective in progress
  // A hierarchical child's collectives end by the parent's deadline (set by Hierarchy).
  Clock::time_point outer_deadline_ = Clock::time_point::max();
  mutable Clock::time_point spin_off_until_;  // CPU contention seen: block without spinning until then
  std::vector<uint8_t> scratch_;
  std::vector<uint8_t> drain_buf_;
  std::vector<float> widened_;
  std::unique_ptr<ShmTransport> shm_;  // set when the collectives run through shared memory
  std::unique_ptr<Hierarchy> hier_;    // set when the allreduce is hierarchical across hosts

  std::atomic<bool> aborted_{false};
  std::atomic<bool> poisoned_{false};
  mutable std::mutex mu_;  // guards abort_reason_, first_error_, stats_
  std::string abort_reason_;
  std::exception_ptr first_error_;
  CommStats stats_;
};

}  // namespace edl::collective
