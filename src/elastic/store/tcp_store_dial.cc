#include "elastic/store/tcp_store_dial.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "common/host_port.h"
#include "edl/error.h"
#include "elastic/store/tcp_store_auth.h"

namespace edl::store {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The server closed the connection during the handshake: transient (a server that sheds
// unauthenticated connections under a flood, or one shutting down) — worth another try.
class HandshakeClosed : public StoreError {
 public:
  using StoreError::StoreError;
};

int ms_left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

// One connect() to one address, bounded by the deadline; returns the fd or -1 with *err set.
int connect_one(const addrinfo* ai, Clock::time_point deadline, std::string* err) {
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *err = errno_text(errno);
    return -1;
  }
  int r = connect(fd, ai->ai_addr, ai->ai_addrlen);
  int e = r == 0 ? 0 : errno;
  if (r != 0 && e == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, std::max(ms_left(deadline), 1)) == 1) {
      socklen_t len = sizeof(e);
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len);
    } else {
      e = ETIMEDOUT;
    }
  }
  if (e != 0) {
    *err = errno_text(e);
    ::close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

int connect_tcp(const DialTarget& t, Clock::time_point deadline, milliseconds timeout, bool retry) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(t.host.c_str(), std::to_string(t.port).c_str(), &hints, &res);
  if (rc != 0) throw StoreError("store " + t.addr + ": cannot resolve host: " + gai_strerror(rc));
  std::string last = "no address";
  for (;;) {
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
      int fd = connect_one(ai, deadline, &last);
      if (fd >= 0) {
        freeaddrinfo(res);
        return fd;
      }
    }
    if (!retry || Clock::now() + milliseconds(50) >= deadline) break;
    std::this_thread::sleep_for(milliseconds(50));  // the server may still be starting
  }
  freeaddrinfo(res);
  throw StoreError("store " + t.addr + ": cannot connect within " + std::to_string(timeout.count()) + " ms: " + last);
}

// Reads one handshake frame.
Message read_frame(int fd, const DialTarget& t, Clock::time_point deadline, milliseconds timeout, const char* expecting,
                   FrameReader* reader) {
  std::string body;
  char buf[4096];
  while (!reader->next(&body)) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, ms_left(deadline)) <= 0)
      throw StoreError("store " + t.addr + ": no " + expecting + " from the server within " +
                       std::to_string(timeout.count()) + " ms (is this an EDL store?)");
    ssize_t r = ::recv(fd, buf, sizeof(buf), 0);
    if (r <= 0)
      throw HandshakeClosed("store " + t.addr + ": connection closed by the server during the handshake (waiting for " +
                            expecting + ")");
    if (!reader->feed(buf, static_cast<size_t>(r)))
      throw StoreError("store " + t.addr + ": not an EDL store (" + reader->error() + ")");
  }
  std::string err;
  auto m = decode_message(body, &err);
  if (!m) throw StoreError("store " + t.addr + ": malformed handshake frame (" + err + ")");
  return *m;
}

void send_frame(int fd, const std::string& bytes, const DialTarget& t) {
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t w = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (w > 0) {
      off += static_cast<size_t>(w);
    } else if (!(w < 0 && errno == EINTR)) {
      throw HandshakeClosed("store " + t.addr + ": connection lost during the handshake (" + errno_text(errno) + ")");
    }
  }
}

void handshake(int fd, const DialTarget& t, Clock::time_point deadline, milliseconds timeout, FrameReader* reader) {
  Message hello = read_frame(fd, t, deadline, timeout, "HELLO", reader);
  if (hello.op != Op::kHello || hello.value != kProtocolMagic || !hello.opt || hello.opt->size() != kNonceBytes)
    throw StoreError("store " + t.addr + ": unexpected greeting (protocol mismatch; expected " + kProtocolMagic + ")");
  Message auth;
  auth.op = Op::kAuth;
  auth.key = t.client_id;
  auth.value = auth_mac(t.secret, *hello.opt);
  send_frame(fd, encode_frame(auth), t);
  Message reply = read_frame(fd, t, deadline, timeout, "AUTH reply", reader);
  if (reply.op == Op::kAuthFail) throw AuthError("store " + t.addr + ": authentication rejected: " + reply.value);
  if (reply.op != Op::kAuthOk) throw StoreError("store " + t.addr + ": unexpected reply to AUTH");
}

}  // namespace

int dial_store(const DialTarget& t, milliseconds timeout, bool retry, FrameReader* reader) {
  auto deadline = Clock::now() + timeout;
  for (;;) {
    int fd = connect_tcp(t, deadline, timeout, retry);
    try {
      handshake(fd, t, deadline, timeout, reader);
      return fd;
    } catch (const HandshakeClosed&) {
      // E.g. closed during the handshake by a server shedding a flood of unauthenticated
      // connections (max_unauthenticated): with `retry`, try again while time is left.
      ::close(fd);
      if (!retry || Clock::now() + milliseconds(50) >= deadline) throw;
      *reader = FrameReader();
      std::this_thread::sleep_for(milliseconds(50));
    } catch (...) {
      ::close(fd);
      throw;
    }
  }
}

}  // namespace edl::store
