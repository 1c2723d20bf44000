// Hierarchy: the hierarchical allreduce of a TcpCommunicator whose ranks span several hosts with the
// same number L >= 2 of ranks on every host (docs/collectives.md, "Hierarchical allreduce").
//
//  - HostLayout is computed on every rank from every rank's host id (exchanged in the transport
//    hello, shm_setup.cc), so all ranks derive the same groups: hosts are numbered by their lowest
//    rank; the *local group* of a rank is the ranks of its host (ascending global rank, position =
//    local rank); its *cross group* is the ranks with the same local rank on every host (by host).
//  - Per generation, two child communicators are built through the store under the parent's prefix
//    ("hier/local/<host>/", "hier/cross/<local rank>/"): the local one runs over shared memory
//    (Transport kAuto on one host), the cross one over TCP. Like the parent they are immutable; they
//    live and die with it.
//  - allreduce, small buffers (< tuning.hier_slice_bytes): (1) local allreduce over shared memory
//    (every local rank holds the host's reduction), (2) the cross group allreduces the whole buffer
//    (every local rank redundantly; no third step). Large buffers: (1) local reduce-scatter over
//    shared memory (local rank i owns slice i of every staging window), (2) each local rank
//    allreduces only its slices over TCP with its cross group (all L ranks of a host drive the links
//    at once, each with 1/L of the bytes), (3) local allgather of the slices over shared memory. kAverage runs as kSum and divides once at the end;
//    16-bit floats are widened to float32 first and rounded once at the end.
//  - Failures: each child detects its own peers' death (EOF of the mesh socket, on shared memory as
//    on TCP), deadline and abort. The parent turns any child error into its own poison and shuts the
//    sockets of parent and both children down, so every rank that waits on this one in any group
//    fails promptly (PeerLostError propagates within one more hop). Mismatches: the local step
//    checks the host's ranks against each other; the cross step carries the whole buffer's element
//    count, so every cross group reaches the same verdict (MismatchError on every rank; the
//    communicator stays usable; the caller's buffer may then hold the host-local reduction).
//
// Thread-safety: as TcpCommunicator (one collective thread; abort() and shutdown() from any thread).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collective/tcp_communicator.h"

namespace edl::collective {

struct EDL_API HostLayout {
  int hosts = 0;
  int local_size = 0;
  int host_index = 0;
  int local_rank = 0;
  std::vector<int> local_members;  // global ranks on this rank's host, ascending
  std::vector<int> cross_members;  // global ranks with this local rank, one per host, by host index
  std::vector<std::string> host_names;  // by host index
  std::string problem;  // why the hierarchical allreduce cannot run ("" when it can)

  static HostLayout of(const std::vector<std::string>& host_of_rank, int rank);
  // The layout every rank derives from every rank's host id under `mode` (EDL_HIERARCHICAL):
  // `problem` says why the allreduce stays flat (kOff, or a layout that does not allow it); kOn with
  // such a layout is a CommError (`setup` and `hosts` name this rank and the hosts).
  static HostLayout decide(const std::vector<std::string>& host_of_rank, int rank, Hierarchical mode,
                           const std::string& setup, const std::string& hosts);
};

// This machine's host id when CommunicatorOptions::host_id is empty (gethostname()).
std::string default_host_id();

// What every rank tells every other after the mesh is built (shm_setup.cc sends it to every peer,
// sparse_setup.cc gathers it): its transport and hierarchical settings, whether it listens on a
// loopback address, and its host id (CommunicatorOptions::host_id, else default_host_id()).
struct TransportHello {
  static constexpr uint64_t kMagic = 0x4f4c4c4548544445ull;  // "EDTHELLO"
  static constexpr size_t kHostMax = 200;
  uint64_t magic;
  uint32_t transport;
  uint32_t hierarchical;
  uint32_t loopback;
  uint32_t host_len;
  char host[kHostMax];
  static TransportHello of(const CommunicatorOptions& options);
  std::string host_id() const { return std::string(host, host_len); }
  bool valid() const { return magic == kMagic && host_len <= kHostMax; }
};

class SpanIndex;

class Hierarchy {
 public:
  // Connects the local and the cross communicator (blocks like TcpCommunicator::connect).
  static std::unique_ptr<Hierarchy> build(const std::shared_ptr<Store>& store, const std::string& prefix, int size,
                                          const CommunicatorOptions& options, const HostLayout& layout);

  // The allreduce of the parent (size() ranks in all) over `spans`; called inside the parent's
  // guarded() after begin(). Returns whether it ran sliced (three steps) rather than whole.
  bool allreduce(const std::vector<Span>& spans, size_t count, DataType dt, ReduceOp op,
                 Clock::time_point deadline);
  void set_tuning(const AlgorithmTuning& t);
  void abort(const std::string& reason);
  void shutdown();  // shuts both children's sockets down (the parent failed)
  int socket_count() const { return (local_ ? local_->socket_count() : 0) + (cross_ ? cross_->socket_count() : 0); }
  const HostLayout& layout() const { return layout_; }
  // The local child's transport: "shm", or "tcp" when the host's segment could not be shared (then
  // the sliced path gathers the slices with an allgatherv over TCP: gather_over_tcp).
  const char* local_transport() const { return local_ ? local_->transport_name() : ""; }

 private:
  Hierarchy(HostLayout layout, int size) : layout_(std::move(layout)), size_(size) {}
  bool run(const std::vector<Span>& spans, size_t count, DataType dt, ReduceOp op);
  // Step 3 when the local communicator fell back to TCP: allgatherv of the contiguous slices.
  void gather_over_tcp(const std::vector<Span>& spans, const std::vector<Span>& part, size_t count, size_t len,
                       DataType dt, const SpanIndex& index);
  std::string where(bool cross) const;

  HostLayout layout_;
  int size_;
  AlgorithmTuning tuning_;
  std::shared_ptr<TcpCommunicator> local_;
  std::shared_ptr<TcpCommunicator> cross_;
  std::vector<uint8_t> gathered_;
  std::vector<uint8_t> slice_copy_;
  std::vector<float> widened_;
};

}  // namespace edl::collective
