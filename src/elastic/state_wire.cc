// The stop-free join's byte protocol (state_wire.h).
#include "elastic/state_wire.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "collective/socket.h"
#include "common/codec.h"
#include "common/crypto.h"
#include "edl/error.h"

namespace edl::elastic::state_wire {
namespace {

constexpr char kRequestMagic[8] = {'E', 'D', 'L', 'S', 'F', 'R', 'Q', '1'};
constexpr char kReplyMagic[8] = {'E', 'D', 'L', 'S', 'F', 'R', 'P', '1'};

// Waits until fd is ready for `events`, in slices of 50 ms so the cancel flag is seen quickly.
Io wait_ready(int fd, short events, Clock::time_point deadline, const std::atomic<bool>* cancel) {
  for (;;) {
    if (cancel && cancel->load()) return Io::kCancelled;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return Io::kTimeout;
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 50)));
    if (r > 0) return Io::kOk;
    if (r < 0 && errno != EINTR) return Io::kClosed;
  }
}

// Writes all of s (a handshake message).
Io send_bytes(int fd, const std::string& s, Clock::time_point deadline, const std::atomic<bool>* cancel) {
  iovec v{const_cast<char*>(s.data()), s.size()};
  IovCursor cur({v});
  int err = 0;
  return send_all(fd, cur, deadline, cancel, &err);
}

std::string io_text(Io io, const char* what) {
  switch (io) {
    case Io::kClosed: return std::string("the connection closed during the ") + what;
    case Io::kTimeout: return std::string("timed out in the ") + what;
    case Io::kCancelled: return std::string("cancelled during the ") + what;
    default: return "";
  }
}

}  // namespace

std::string encode(const Request& r) {
  std::string out;
  codec::Writer<std::string> w(out);
  w.raw(kRequestMagic, 8);
  w.i64(r.step);
  w.u64(r.offset);
  w.u64(r.length);
  return out;
}

std::string encode(const Reply& r) {
  std::string out;
  codec::Writer<std::string> w(out);
  w.raw(kReplyMagic, 8);
  w.u32(r.status);
  w.u32(0);
  w.u64(r.total);
  w.u64(r.length);
  return out;
}

namespace {

// A Reader over one fixed-size message whose magic was checked.
codec::Reader message(const uint8_t* p, size_t n, const char* magic, const char* what) {
  codec::Reader r(p, n, what);
  if (r.raw(8, "magic") != std::string_view(magic, 8))
    throw DataError(std::string("stop-free join: not a ") + what + " (bad magic)");
  return r;
}

}  // namespace

Request decode_request(const uint8_t* p) {
  codec::Reader r = message(p, kRequestBytes, kRequestMagic, "state request");
  Request q;
  q.step = r.i64("step");
  q.offset = r.u64("offset");
  q.length = r.u64("length");
  return q;
}

Reply decode_reply(const uint8_t* p) {
  codec::Reader r = message(p, kReplyBytes, kReplyMagic, "state reply");
  Reply q;
  q.status = r.u32("status");
  r.u32("padding");
  q.total = r.u64("total");
  q.length = r.u64("length");
  return q;
}

collective::mesh::Identity identity(const std::string& job, uint64_t generation, int size, const std::string& secret) {
  collective::mesh::Identity id;
  id.generation = generation;
  id.prefix_tag = collective::fnv1a("edl-state/" + job);
  id.size = size;
  id.secret = secret;
  return id;
}

void IovCursor::advance(size_t n) {
  while (n > 0 && i_ < v_.size()) {
    const size_t take = std::min(n, v_[i_].iov_len);
    v_[i_].iov_base = static_cast<char*>(v_[i_].iov_base) + take;
    v_[i_].iov_len -= take;
    n -= take;
    if (v_[i_].iov_len == 0) ++i_;
  }
  skip_empty();
}

void IovCursor::skip_empty() {
  while (i_ < v_.size() && v_[i_].iov_len == 0) ++i_;
}

std::vector<iovec> cut(const std::vector<iovec>& space, uint64_t offset, uint64_t length) {
  std::vector<iovec> out;
  uint64_t at = 0;
  for (const auto& piece : space) {
    const uint64_t begin = at, end = at + piece.iov_len;
    at = end;
    if (end <= offset) continue;
    if (begin >= offset + length) break;
    const uint64_t from = std::max(begin, offset), to = std::min(end, offset + length);
    out.push_back(iovec{static_cast<char*>(piece.iov_base) + (from - begin), static_cast<size_t>(to - from)});
  }
  return out;
}

uint64_t total_bytes(const std::vector<iovec>& space) {
  uint64_t n = 0;
  for (const auto& piece : space) n += piece.iov_len;
  return n;
}

Io send_all(int fd, IovCursor& cur, Clock::time_point deadline, const std::atomic<bool>* cancel, int* err) {
  *err = 0;
  while (!cur.done()) {
    collective::IoResult r = collective::try_sendv(fd, cur.data(), cur.count());
    cur.advance(r.bytes);
    if (r.err != 0 && r.err != EAGAIN && r.err != EWOULDBLOCK && r.err != EINTR) {
      *err = r.err;
      return Io::kClosed;
    }
    if (r.bytes == 0 && !cur.done()) {
      Io w = wait_ready(fd, POLLOUT, deadline, cancel);
      if (w != Io::kOk) return w;
    }
  }
  return Io::kOk;
}

Io recv_some(int fd, IovCursor& cur, int* err) {
  *err = 0;
  while (!cur.done()) {
    collective::IoResult r = collective::try_recvv(fd, cur.data(), cur.count());
    cur.advance(r.bytes);
    if (r.err == -1) return Io::kClosed;
    if (r.err != 0 && r.err != EAGAIN && r.err != EWOULDBLOCK && r.err != EINTR) {
      *err = r.err;
      return Io::kClosed;
    }
    if (r.bytes == 0) return cur.done() ? Io::kOk : Io::kTimeout;
  }
  return Io::kOk;
}

Io recv_all(int fd, IovCursor& cur, Clock::time_point deadline, const std::atomic<bool>* cancel, int* err) {
  for (;;) {
    Io io = recv_some(fd, cur, err);
    if (io != Io::kTimeout) return io;
    Io w = wait_ready(fd, POLLIN, deadline, cancel);
    if (w != Io::kOk) return w;
  }
}

std::string connect_handshake(int fd, const collective::mesh::Identity& id, int my_rank, int peer,
                              Clock::time_point deadline, const std::atomic<bool>* cancel, bool* auth) {
  using collective::mesh::ConnectSide;
  *auth = false;
  ConnectSide hs(id, my_rank, peer, crypto::random_bytes(collective::mesh::kNonceBytes));
  Io io = send_bytes(fd, hs.hello(), deadline, cancel);
  while (io == Io::kOk && hs.state() != ConnectSide::State::kDone && hs.state() != ConnectSide::State::kFailed) {
    std::string buf(hs.wanted(), '\0');
    IovCursor cur({iovec{buf.data(), buf.size()}});
    int err = 0;
    io = recv_all(fd, cur, deadline, cancel, &err);
    if (io != Io::kOk) break;
    std::string reply = hs.feed(reinterpret_cast<const uint8_t*>(buf.data()), buf.size());
    if (!reply.empty()) io = send_bytes(fd, reply, deadline, cancel);
  }
  if (io != Io::kOk) return io_text(io, "handshake");
  if (hs.state() == ConnectSide::State::kFailed) {
    *auth = hs.auth_failure();
    return hs.reason();
  }
  return "";
}

std::string accept_handshake(int fd, const collective::mesh::Identity& id, int my_rank, Clock::time_point deadline,
                             const std::atomic<bool>* cancel) {
  using collective::mesh::AcceptSide;
  AcceptSide hs(id, my_rank, crypto::random_bytes(collective::mesh::kNonceBytes));
  while (hs.state() == AcceptSide::State::kWantHello || hs.state() == AcceptSide::State::kWantProof) {
    std::string buf(hs.wanted(), '\0');
    IovCursor cur({iovec{buf.data(), buf.size()}});
    int err = 0;
    Io io = recv_all(fd, cur, deadline, cancel, &err);
    if (io != Io::kOk) return io_text(io, "handshake");
    std::string reply = hs.feed(reinterpret_cast<const uint8_t*>(buf.data()), buf.size());
    if (!reply.empty()) {
      io = send_bytes(fd, reply, deadline, cancel);
      if (io != Io::kOk) return io_text(io, "handshake");
    }
  }
  return hs.state() == AcceptSide::State::kDone ? "" : hs.reason();
}

}  // namespace edl::elastic::state_wire
