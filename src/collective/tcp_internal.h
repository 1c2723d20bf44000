// Implementation pieces shared by the TcpCommunicator source files: the collective header, queued
// scatter/gather transfers and the spin-then-poll waiter. Not a public interface.
#pragma once

#include <poll.h>
#include <sys/uio.h>

#include <string>
#include <vector>

#include "collective/kind.h"
#include "collective/reduce.h"
#include "collective/tcp_communicator.h"
#include "edl/error.h"

namespace edl::collective {


// First bytes of every collective on every connection (48 bytes, host byte order: same-arch jobs).
struct TcpCommunicator::Header {
  uint32_t magic;
  uint8_t kind;
  uint8_t dtype;
  uint8_t op;
  uint8_t pad;
  int32_t root;
  int32_t rank;
  uint64_t count;    // elements
  uint64_t seq;      // collective sequence number on this communicator
  uint64_t payload;  // bytes that follow this header on this connection (eager data)
  uint64_t reserved;
};
static_assert(sizeof(TcpCommunicator::Header) == 48, "wire header is 48 bytes");
constexpr uint32_t kHeaderMagic = 0x45444c43u;  // "EDLC"
// Header::reserved of a hierarchical cross-host step from a host whose own ranks disagreed.
constexpr uint64_t kHostMismatch = ~uint64_t{0};

// Why peer's header `h` cannot be acted upon, or "" when it can (wire_header.cc). Checked before
// any length in it is used: magic and rank, known kind / dtype / op, count * dtype size without
// overflow, a payload the kind allows (whole buffer or nothing), an allgather contribution at most
// max_gather_bytes, and for other kinds a payload above that cap only for this rank's own call
// (same kind, dtype and count as `mine`). A problem is a CommError naming the peer: the streams can
// no longer be trusted.
EDL_API std::string header_problem(const TcpCommunicator::Header& h, const TcpCommunicator::Header& mine, int peer,
                                   uint64_t max_gather_bytes);

// The MismatchError text when rank rb's header `b` disagrees with rank 0's `a` on a field that
// must agree (seq, kind, dtype, count except for allgather, op for allreduce, root for broadcast),
// else "" (wire_header.cc).
std::string mismatch_text(const TcpCommunicator::Header& a, const TcpCommunicator::Header& b, int rb);

// One queued transfer on one connection: a list of spans; `drain` discards received bytes.
struct TcpCommunicator::Xfer {
  std::vector<Span> spans;
  size_t idx = 0;   // current span
  size_t off = 0;   // offset within it
  size_t remaining = 0;
  bool drain = false;

  static Xfer of(std::vector<Span> s) {
    Xfer x;
    x.spans = std::move(s);
    for (auto& sp : x.spans) x.remaining += sp.bytes;
    return x;
  }
  static Xfer drainer(size_t n) {
    Xfer x;
    x.remaining = n;
    x.drain = true;
    return x;
  }
  // Fills iov with the untransferred part (at most max entries); drain uses `sink`.
  int fill(iovec* iov, int max, void* sink, size_t sink_bytes) const;
  void advance(size_t n);
};

// A FIFO of transfers. Unlike std::deque an empty one allocates nothing, so a collective can keep
// one pair per rank of a large communicator and touch only its few linked peers.
struct XferQueue {
  std::vector<TcpCommunicator::Xfer> items;
  size_t head = 0;
  bool empty() const { return head == items.size(); }
  TcpCommunicator::Xfer& front() { return items[head]; }
  void pop_front() {
    if (++head == items.size()) items.clear(), head = 0;
  }
  void push_back(TcpCommunicator::Xfer x) { items.push_back(std::move(x)); }
};

struct TcpCommunicator::PeerQueues {
  XferQueue send;
  XferQueue recv;
};

// Spin-then-block wait with the collective's deadline; checks abort on every idle round.
struct TcpCommunicator::Waiter {
  Waiter(const TcpCommunicator& c, Clock::time_point deadline, const char* what);
  void reset() { fds.clear(); peers.clear(); }
  void want(int fd, short events, int peer) {
    fds.push_back(pollfd{fd, events, 0});
    peers.push_back(peer);
  }
  void progressed();
  // No progress this round: spin until tuning.spin has passed, then poll(); throws TimeoutError /
  // AbortedError.
  void idle();

  const TcpCommunicator& comm;
  Clock::time_point deadline;
  const char* what;
  Clock::time_point last_progress;
  std::vector<pollfd> fds;
  std::vector<int> peers;
};

// Runs one collective: an InvalidArgument (mismatch, bad argument) passes through, the streams
// being in sync; any other error poisons the communicator (fail()).
template <typename Fn>
void TcpCommunicator::guarded(Fn&& fn) {
  try {
    fn();
  } catch (const InvalidArgument&) {
    throw;  // mismatch / bad argument: the streams are in sync, the communicator stays usable
  } catch (const CommError&) {
    fail(std::current_exception());
  } catch (const std::exception& e) {
    fail(std::make_exception_ptr(CommError(std::string("collective failed: ") + e.what())));
  }
}

// 16-bit floats are reduced in float32 end to end: widens `spans` (count elements of dt) into
// `scratch`, runs fn(float32 spans, DataType::kFloat32), then rounds the result back into `spans`
// once. `scratch` keeps its memory between calls up to 64 MiB.
template <typename Fn>
void with_float32(const std::vector<Span>& spans, size_t count, DataType dt, std::vector<float>& scratch, Fn&& fn) {
  const size_t es = dtype_size(dt);
  scratch.resize(count);
  size_t at = 0;
  for (const Span& s : spans) {
    widen_to_float(s.data, scratch.data() + at, s.bytes / es, dt);
    at += s.bytes / es;
  }
  fn(std::vector<Span>{Span{scratch.data(), count * sizeof(float)}}, DataType::kFloat32);
  at = 0;
  for (const Span& s : spans) {
    narrow_from_float(scratch.data() + at, s.data, s.bytes / es, dt);
    at += s.bytes / es;
  }
  if (scratch.capacity() > (size_t{16} << 20)) std::vector<float>().swap(scratch);
}

}  // namespace edl::collective
