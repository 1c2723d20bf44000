// TcpCommunicator: EDL's own TCP transport and collective algorithms (the Communicator behind
// Communicator::create). Design and wire protocol: docs/collectives.md.
//
//  - A mesh of one-way sockets: for every linked peer, one connection this rank sends on (it
//    connected it) and one it receives on (it accepted it), bootstrapped through the store with a
//    handshake that proves the job secret both ways (mesh_handshake.h); connections of other jobs
//    or generations, ranks outside this generation and wrong secrets are refused. Small
//    communicators link every pair (full mesh); large ones only the peers their algorithms use
//    (sparse mesh, mesh_topology.h: O(log n) sockets per rank).
//  - Full mesh: every collective starts with a 48-byte header sent to every peer; small payloads
//    ride in the same message (eager). Every length in a peer's header is checked against this
//    rank's own call (or options.max_gather_bytes for allgather) before anything is allocated. All
//    ranks see all headers, so all of them detect a mismatch identically and throw the same
//    MismatchError after draining what was sent (the streams stay in sync).
//  - Sparse mesh: every collective starts with a recursive-doubling combine (combine.cc) of an
//    agreement (agreement.h: the header of the lowest rank and of the lowest rank that differs from
//    it), carrying the data itself for small allreduces, broadcasts and allgathers; the same
//    MismatchError reaches every rank (sparse_collectives.cc).
//  - Non-blocking sockets; waits spin briefly, then poll() on the sockets plus an eventfd that
//    abort() signals. Every collective has the deadline options.timeout.
//  - Any transport error, deadline or abort poisons the communicator: later calls rethrow the
//    first error, and the sockets are shut down so peers waiting on this rank fail promptly (in the
//    sparse mesh this is how a death reaches the ranks that are not the dead rank's neighbours).
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
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collective/mesh_topology.h"
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
  // On the sparse mesh the direct exchange is replaced by recursive doubling (log2(n) exchanges of
  // the whole buffer, with the agreement): up to eager_bytes while every rank sends at most
  // direct_total_bytes (bytes * rounds); otherwise the choice above.
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
enum class AllreduceAlgorithm : uint8_t { kDirect = 0, kHalvingDoubling = 1, kRing = 2, kRecursiveDoubling = 3 };
// `one_host`: every rank's published address is a loopback one (TcpCommunicator::one_host()).
// `sparse`: the communicator runs on the sparse mesh (no direct exchange there).
EDL_API AllreduceAlgorithm choose_allreduce(size_t bytes, int ranks, const AlgorithmTuning& t, bool one_host = false,
                                            bool sparse = false);
EDL_API const char* algorithm_name(AllreduceAlgorithm a);

struct CommStats {
  uint64_t collectives = 0;
  uint64_t eager_allreduces = 0;
  uint64_t ring_allreduces = 0;
  uint64_t halving_doubling_allreduces = 0;
  uint64_t recursive_doubling_allreduces = 0;
  uint64_t bytes_sent = 0;
  // Transfers queued to peers and completed (headers, eager payloads, combine and halving-doubling
  // messages; the ring's chunks are not counted): the message count of a collective or a
  // negotiation round (tests count it).
  uint64_t messages_sent = 0;
  uint64_t combines = 0;  // recursive-doubling combines run (sparse mesh: one per collective)
};

class ShmTransport;
class Hierarchy;
struct TransportHello;

// "auto" | "tcp" | "shm" (Config::transport, already validated) as a Transport.
inline Transport transport_from_name(const std::string& s) {
  return s == "tcp" ? Transport::kTcp : s == "shm" ? Transport::kShm : Transport::kAuto;
}
// "auto" | "full" | "sparse" (Config::mesh, already validated) as a Mesh.
inline Mesh mesh_from_name(const std::string& s) {
  return s == "full" ? Mesh::kFull : s == "sparse" ? Mesh::kSparse : Mesh::kAuto;
}
// "auto" | "0" | "1" (Config::hierarchical, already validated) as a Hierarchical.
inline Hierarchical hierarchical_from_name(const std::string& s) {
  return s == "0" ? Hierarchical::kOff : s == "1" ? Hierarchical::kOn : Hierarchical::kAuto;
}

class EDL_API TcpCommunicator final : public Communicator {
 public:
  static std::shared_ptr<TcpCommunicator> connect(std::shared_ptr<Store> store, const std::string& prefix, int rank,
                                                  int size, const CommunicatorOptions& options);
  // Mesh::kAuto: a full mesh up to this many ranks (2(n-1) <= 2 log2(n) + 4 sockets) ...
  static constexpr int kFullMeshRanks = 4;
  // ... and up to this many when the shared-memory transport may be chosen (it needs the full mesh).
  static constexpr int kShmFullMeshRanks = 8;
  // Whether a communicator of `size` ranks with these options links every pair of ranks.
  static bool full_mesh(int size, const CommunicatorOptions& options);
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
  // Merges `theirs` into `mine` (`mine_lower`: mine holds the lower ranks' part); both ranks of a
  // pair call it with the same two parts, so it must be deterministic given (lower, upper).
  using Merge = std::function<void(std::vector<uint8_t>& mine, std::vector<uint8_t>& theirs, bool mine_lower)>;
  // A collective of its own: every rank's `msg` is replaced by the merge of all ranks' messages,
  // combined by recursive doubling (log2(n) exchanges, +2 with a fold) over the mesh; the engine's
  // negotiation on the sparse mesh. A peer's message above rank_limit bytes per rank it stands for
  // is a CommError (nothing is allocated for it). Same error contract as allreduce.
  void reduce_messages(std::vector<uint8_t>& msg, const Merge& merge, uint64_t rank_limit, const char* what);
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
  // The mesh: which peers this rank links (mesh_topology.h).
  const MeshTopology& topology() const { return topo_; }
  bool sparse() const { return topo_.is_sparse(); }
  // Mesh sockets this rank holds open (its own and its hierarchical children's): 2 per linked peer.
  int socket_count() const;
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
  // Sparse mesh: the transport hello as an allgather (every rank's transport settings, host id and
  // whether it listens on loopback), then the hierarchical children when the hosts allow them
  // (sparse_setup.cc; the shared-memory transport needs the full mesh). With
  // options.one_host_known no exchange: the mesh handshake checked the neighbours' setup words.
  void sparse_setup(const std::shared_ptr<Store>& store, const std::string& prefix);
  // The setup word a rank sends in its mesh Hellos (sparse_setup.cc): transport, hierarchical,
  // loopback, one_host_known.
  static uint64_t setup_word(const CommunicatorOptions& o);
  // The same word from a transport hello (the allgather's), with one_host_known as given.
  static uint64_t setup_word(const TransportHello& h, bool one_host_known);
  // Why a sparse-mesh neighbour's setup word `theirs` cannot work with ours ("" when it can).
  static std::string setup_mismatch(uint64_t mine, uint64_t theirs);
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

  // Sparse mesh (combine.cc, sparse_collectives.cc).
  // Sends `out` framed to send_peer (when >= 0) and receives one framed message from recv_peer
  // (when >= 0) into `in`; a frame above `limit` bytes is a CommError.
  void exchange_frames(int send_peer, const std::vector<uint8_t>* out, int recv_peer, std::vector<uint8_t>* in,
                       uint64_t limit, const char* what);
  void combine(std::vector<uint8_t>& msg, const Merge& merge, uint64_t rank_limit, const char* what);
  void sparse_allreduce(const std::vector<Span>& spans, size_t count, DataType dt, ReduceOp op, uint64_t whole_count);
  void recursive_doubling(const std::vector<Span>& spans, size_t count, DataType dt, ReduceOp op, const Header& h);
  void sparse_broadcast(void* data, size_t count, DataType dt, int root);
  void scatter_allgather_broadcast(void* data, size_t bytes, int root, size_t es);
  void sparse_allgatherv(const void* in, size_t count, DataType dt, std::vector<uint8_t>& out,
                         std::vector<size_t>* counts_out);
  void sparse_barrier();
  // The agreement of a collective alone (no payload): throws the same MismatchError / CommError on
  // every rank when the ranks disagree.
  void agree(const Header& h);
  // The largest combine message one rank may send in this rank's collective of `own_payload` bytes
  // beside the agreement (a disagreeing rank's message included).
  uint64_t rank_limit(uint64_t own_payload) const;

  int rank_;
  int size_;
  CommunicatorOptions options_;
  AlgorithmTuning tuning_;
  bool one_host_ = false;
  MeshTopology topo_;
  std::vector<int> send_fd_;  // per peer (own rank and peers not linked: -1)
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
  std::vector<uint8_t> combine_in_;  // a peer's message in the combine
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
