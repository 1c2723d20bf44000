// Communicator: an immutable group of `size` processes, each with a fixed rank, connected by a mesh
// of TCP connections (a full mesh for small groups, a sparse one of O(log size) connections per rank
// for large ones: see Mesh), running collectives with a deadline.
//
// One Communicator exists per membership generation. It never changes rank or size. After ANY
// error (peer lost, deadline passed, abort) it is poisoned: every pending and later call throws a
// CommError subclass, and the elastic runtime builds a new Communicator for the next generation
// under a new store prefix. Ranks that disagree on a collective's count / dtype / op / root all get
// MismatchError naming the mismatch (no memory is written past the caller's buffers).
//
// Thread-safety: collectives on one Communicator must be issued from one thread at a time (the
// background engine's thread, or the user's thread for blocking calls — not both at once). abort()
// may be called from any thread at any time and makes blocked calls return promptly.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "edl/export.h"
#include "edl/store.h"
#include "edl/types.h"

namespace edl {

// How the ranks of a communicator exchange data (docs/collectives.md, "Shared-memory transport").
//   kTcp:  the TCP mesh carries everything.
//   kShm:  all ranks must be on one host (equal host_id); collectives run through one shared-memory
//          segment (memfd, never named in /dev/shm), the TCP mesh stays for failure detection and
//          wake-ups. Construction fails with CommError when that is not possible.
//   kAuto: kShm when every rank has the same host_id and the segment can be shared, else kTcp.
// Every rank of a communicator must use the same setting (a rank with kTcp against ranks with
// kAuto/kShm fails construction or the first collective with CommError).
enum class Transport : uint8_t { kAuto = 0, kTcp = 1, kShm = 2 };

// Hierarchical allreduce for communicators that span several hosts (docs/collectives.md,
// "Hierarchical allreduce"): a shared-memory reduction among the ranks of each host, an exchange over
// TCP among the ranks with the same local index on every host (each carries 1/L of the buffer), and
// a shared-memory allgather. Considered only with Transport kAuto.
//   kAuto: hierarchical when the ranks span >= 2 hosts and every host has the same number (>= 2).
//   kOff:  never (flat TCP across hosts).
//   kOn:   as kAuto, but construction fails with CommError when the layout does not allow it.
// Every rank must use the same setting (else construction fails with CommError).
enum class Hierarchical : uint8_t { kAuto = 0, kOff = 1, kOn = 2 };

// Which peers a rank connects (docs/collectives.md, "Sparse mesh").
//   kAuto:   a full mesh up to 4 ranks, and up to 8 ranks when the shared-memory transport may be
//            chosen (Transport kAuto) or at any size when it is required (kShm); else sparse.
//   kFull:   every pair of ranks: 2(n-1) sockets per rank (the shared-memory transport needs it).
//   kSparse: only the peers the algorithms use (ring neighbours, the fold partner and the log2(n)
//            recursive-doubling partners): at most 2 floor(log2 n) + 4 sockets per rank. With
//            Transport kShm construction fails with CommError.
// Every rank must use the same setting (else the mesh cannot form: TimeoutError at connect_timeout
// quoting the refused connections).
enum class Mesh : uint8_t { kAuto = 0, kFull = 1, kSparse = 2 };

struct CommunicatorOptions {
  // Deadline of every collective, from the call until completion on this rank. Default 30 s (as
  // Gloo and Horovod); EDL_TIMEOUT_MS overrides it through Config.
  std::chrono::milliseconds timeout{30000};
  // Deadline for connecting the mesh through the store. Default 30 s.
  std::chrono::milliseconds connect_timeout{30000};
  // Address this rank listens on for its peers. Default loopback; edl-run sets EDL_BIND_ADDR for
  // multi-host jobs.
  std::string bind_address = "127.0.0.1";
  // Tag mixed into the handshake so connections of different generations never cross. Default 0.
  uint64_t generation = 0;
  // Job secret proved both ways on every mesh connection (HMAC-SHA256 challenge-response, see
  // docs/collectives.md); the elastic runtime passes EDL_JOB_SECRET. Default empty: the handshake
  // then only keeps jobs and generations apart. Ranks with different secrets never connect
  // (AuthError on the dialling side).
  std::string secret;
  // Largest contribution one peer may announce in an allgatherv, in bytes; a larger announced count
  // fails the collective on every rank with CommError before anything is allocated. Default 1 GiB.
  uint64_t max_gather_bytes = uint64_t{1} << 30;
  // Set to true from any thread to abandon create() while the mesh is being built: it throws
  // AbortedError within ~0.1 s instead of waiting for connect_timeout (the elastic runtime sets it
  // when a member of the generation dies during the build). Default none.
  std::shared_ptr<const std::atomic<bool>> cancel;
  // Transport (see Transport). Default kTcp for a communicator built directly; the elastic runtime
  // passes EDL_TRANSPORT (default auto) through Config.
  Transport transport = Transport::kTcp;
  // This rank's host, compared across ranks by kAuto / kShm. Default empty: gethostname(). The
  // runtime passes EDL_HOSTNAME.
  std::string host_id;
  // Hierarchical allreduce across hosts (see Hierarchical); only with transport kAuto. Default kAuto;
  // the runtime passes EDL_HIERARCHICAL.
  Hierarchical hierarchical = Hierarchical::kAuto;
  // Full or sparse mesh (see Mesh). Default kAuto; the runtime passes EDL_MESH.
  Mesh mesh = Mesh::kAuto;
  // The caller knows that every rank runs on this host (the elastic runtime sets it when its
  // decision lists every member on this worker's host). The sparse mesh then needs no transport
  // setup exchange after the mesh is built: every rank's settings are checked by its neighbours in
  // the mesh handshake instead (docs/collectives.md, "Sparse mesh"). Every rank must pass the same
  // value (a neighbour that differs fails construction with CommError). Default false.
  bool one_host_known = false;
  // Every rank's listening address ("host:port", in rank order) when the caller already knows them
  // (the elastic runtime: from its decision's member list). The mesh then dials its linked peers at
  // once, without publishing or reading addresses through the store, and accepts on listen_fd.
  // Default empty: each rank listens on a port of its own and the addresses go through the store
  // (docs/collectives.md, "Mesh bootstrap").
  std::vector<std::string> addresses;
  // With `addresses`: a listening socket at addresses[rank] that the caller owns and keeps open (one
  // per process, for every generation: peers may dial it before this rank starts its build). The
  // communicator accepts on it while its mesh is built and never closes it. Default -1 (none).
  int listen_fd = -1;
};

class EDL_API Communicator {
 public:
  // Connects rank `rank` of `size` through `store` (keys are placed under `prefix`).
  // Blocks until all peers are connected or options.connect_timeout passes (TimeoutError).
  static std::shared_ptr<Communicator> create(std::shared_ptr<Store> store, const std::string& prefix, int rank,
                                              int size, const CommunicatorOptions& options = {});
  virtual ~Communicator();

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual uint64_t generation() const = 0;

  // In-place allreduce of count elements. kAverage divides by size() after the sum.
  virtual void allreduce(void* data, size_t count, DataType dtype, ReduceOp op) = 0;
  // In-place broadcast of count elements from root.
  virtual void broadcast(void* data, size_t count, DataType dtype, int root) = 0;
  // Gathers `count` elements from every rank (counts may differ per rank) into `out`, concatenated
  // in rank order; `counts_out` (optional) receives every rank's count.
  virtual void allgatherv(const void* in, size_t count, DataType dtype, std::vector<uint8_t>& out,
                          std::vector<size_t>* counts_out = nullptr) = 0;
  virtual void barrier() = 0;

  // Poisons the communicator: blocked and future calls throw AbortedError(reason). Any thread.
  virtual void abort(const std::string& reason) = 0;
  virtual bool aborted() const = 0;
};

}  // namespace edl
