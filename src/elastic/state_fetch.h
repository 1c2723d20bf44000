// StateFetch and CatchUp: the newcomer's side of a stop-free join (docs/elastic.md, "Stop-free
// joins").
//
// StateFetch holds one connection per survivor (StateServer, protocol state_wire.h) and fetches a
// byte range of the survivors' commit of a step, striped: each survivor sends an equal slice, all
// slices arrive in parallel (one poll loop), straight into the newcomer's registered tensors.
// CatchUp decides how much to fetch at each batch boundary: the tensors arrive chunk by chunk, each
// chunk from the commit of the boundary it is installed at, sized so the newcomer is back before the
// survivors finish computing their next step.
//
// Thread-safety: the training thread; the cancel flag may be set from any thread (a failure of the
// generation), which ends a fetch in progress with AbortedError within ~50 ms.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "edl/export.h"

namespace edl::elastic {

struct FetchSource {
  int rank = 0;          // the survivor's rank in the generation
  std::string address;   // its StateServer's "host:port"
};

struct StateFetchOptions {
  std::string job;                               // EDL_JOB_ID
  std::string secret;                            // EDL_JOB_SECRET
  uint64_t generation = 0;                       // the generation both ends are members of
  int rank = 0;                                  // this newcomer's rank in it
  int size = 0;                                  // its size
  std::chrono::milliseconds io_timeout{30000};   // EDL_TIMEOUT_MS: a survivor silent this long is lost
};

class EDL_API StateFetch {
 public:
  // `space`: this worker's registered tensors in registration order (the bytes are written there).
  StateFetch(StateFetchOptions o, std::vector<FetchSource> sources, std::vector<iovec> space,
             const std::atomic<bool>* cancel);
  ~StateFetch();
  StateFetch(const StateFetch&) = delete;
  StateFetch& operator=(const StateFetch&) = delete;

  // Dials every source and runs the handshakes (idempotent). Throws PeerLostError (a survivor
  // unreachable or closing), AuthError (another job secret), AbortedError (cancelled).
  void connect();
  // Fetches [offset, offset + length) of the survivors' commits of `step` into the space. True when
  // every slice arrived; false when a survivor had no commit of that step (bytes of the range may
  // have been written: the caller fetches the range again later). Throws PeerLostError (a survivor
  // closed or failed), TimeoutError (silent past io_timeout), AbortedError (cancelled) and
  // MismatchError (a survivor's tensors are not as large as this worker's).
  bool fetch(int64_t step, uint64_t offset, uint64_t length);
  // Of the last fetch: seconds until every survivor had answered (its commit of the step existed),
  // and seconds of transfer after that.
  double answer_s() const { return answer_s_; }
  double transfer_s() const { return transfer_s_; }
  uint64_t total() const { return total_; }
  size_t sources() const { return sources_.size(); }

 private:
  struct Peer;
  StateFetchOptions o_;
  std::vector<FetchSource> sources_;
  std::vector<iovec> space_;
  uint64_t total_ = 0;
  const std::atomic<bool>* cancel_;
  std::vector<int> fds_;
  double answer_s_ = 0, transfer_s_ = 0;
};

class EDL_API CatchUp {
 public:
  // share: the fraction of the survivors' compute time per step the newcomer may spend fetching
  // (EDL_JOIN_FETCH_SHARE, default 0.5); max_chunk: at most this many bytes per boundary (0 = no
  // cap; EDL_JOIN_MAX_CHUNK_BYTES).
  CatchUp(std::unique_ptr<StateFetch> fetch, double share, uint64_t max_chunk = 0);
  // At the batch boundary of `step`: fetches the next chunk of the commit of `step`.
  // others_us: the median compute time of the other members' last step (0 = unknown); own_us: this
  // worker's. The survivors commit at their boundary, so their servers answer only once that commit
  // exists; what is left of their step after it is the time a chunk may take:
  //   bytes = rate × (share × (others_us − time to the answers) − own_us),
  // rate = the transfer rate measured from the answers on (lowered at once, raised gently), at most
  // twice the last chunk, at least kMinChunk and 1/kMaxBoundaries of the tensor space (a catch-up
  // takes at most kMaxBoundaries boundaries, even when the survivors' answers come later than their
  // compute ends: a loaded machine), at most max_chunk. Returns true once every byte has arrived.
  bool at_boundary(int64_t step, int64_t others_us, int64_t own_us);
  // Fetches everything left of the commit of `step` at once (the training function returned).
  bool finish(int64_t step);
  uint64_t installed() const { return installed_; }
  uint64_t total() const { return fetch_->total(); }
  int chunks() const { return chunks_; }

  static constexpr uint64_t kMinChunk = 64 << 10;    // always progress, however short the steps
  static constexpr uint64_t kFirstChunk = 1 << 20;   // before a transfer rate was measured
  static constexpr uint64_t kMaxBoundaries = 32;     // a catch-up ends within this many boundaries

 private:
  bool fetch_chunk(int64_t step, uint64_t bytes);
  std::unique_ptr<StateFetch> fetch_;
  double share_;
  uint64_t max_chunk_;
  uint64_t installed_ = 0;
  double rate_ = 0;    // bytes per second of the transfers so far (0 = not measured yet)
  double answer_ = 0;  // seconds until the survivors answered, last chunk
  uint64_t last_ = 0;  // bytes of the last chunk
  int chunks_ = 0;
};

}  // namespace edl::elastic
