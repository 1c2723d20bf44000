#include "collective/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "collective/fd_limit.h"
#include "edl/error.h"

namespace edl::collective {

bool is_loopback_address(const std::string& host_port) {
  std::string host = host_port;
  const size_t colon = host.rfind(':');
  if (colon != std::string::npos && host.find(':') == colon) host = host.substr(0, colon);  // v4 / name: strip the port
  if (!host.empty() && host.front() == '[') host = host.substr(1, host.find(']') - 1);        // [v6]:port
  if (host == "localhost") return true;
  in_addr a4{};
  if (inet_pton(AF_INET, host.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  in6_addr a6{};
  return inet_pton(AF_INET6, host.c_str(), &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string peer_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
    return "[" + std::string(host) + "]:" + std::to_string(port);
  }
  return "?";
}

namespace {

bool resolve(const std::string& host, int port, sockaddr_storage* out, socklen_t* len) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string port_s = std::to_string(port);
  if (getaddrinfo(host.c_str(), port_s.c_str(), &hints, &res) != 0 || !res) return false;
  std::memcpy(out, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  freeaddrinfo(res);
  return true;
}

}  // namespace

int listen_any_port(const std::string& address, int* port, int prefer) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (!resolve(address, prefer > 0 ? prefer : 0, &ss, &len)) throw CommError("cannot resolve bind address '" + address + "'");
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 && (errno == EMFILE || errno == ENFILE)) throw_descriptor_limit("listening on " + address, errno);
  if (fd < 0) throw CommError("socket(): " + errno_text(errno));
  if (prefer != 0) {
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  }
  if (prefer > 0) {
    if (bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {  // taken: any port
      close(fd);
      return listen_any_port(address, port, -1);
    }
  }
  if ((prefer <= 0 && bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) || listen(fd, 256) != 0) {
    int e = errno;
    close(fd);
    throw CommError("cannot listen on " + address + ": " + errno_text(e));
  }
  sockaddr_storage bound{};
  socklen_t blen = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &blen);
  *port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  set_nonblocking(fd, true);
  return fd;
}

void set_nonblocking(int fd, bool on) {
  int fl = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK));
}

void tune_data_socket(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  int buf = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
  set_nonblocking(fd, true);
}

int connect_until(const std::string& host_port, Clock::time_point deadline, bool* refused) {
  std::string host;
  int port = 0;
  if (std::string why = split_host_port(host_port, &host, &port); !why.empty())
    throw CommError("malformed peer address '" + host_port + "': " + why + " (want host:port)");
  while (Clock::now() < deadline) {
    sockaddr_storage ss{};
    socklen_t len = 0;
    if (!resolve(host, port, &ss, &len)) throw CommError("cannot resolve peer address '" + host_port + "'");
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 && (errno == EMFILE || errno == ENFILE)) throw_descriptor_limit("connecting to " + host_port, errno);
    if (fd < 0) throw CommError("socket(): " + errno_text(errno));
    set_nonblocking(fd, true);
    int rc = connect(fd, reinterpret_cast<sockaddr*>(&ss), len);
    int err = rc == 0 ? 0 : errno;
    if (rc != 0 && errno == EINPROGRESS) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      pollfd p{fd, POLLOUT, 0};
      if (left > 0 && poll(&p, 1, static_cast<int>(left)) == 1) {
        err = 0;
        socklen_t el = sizeof(err);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
        rc = err == 0 ? 0 : -1;
      }
    }
    if (rc == 0) return fd;
    close(fd);
    if (refused && err == ECONNREFUSED) {
      *refused = true;
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // refused: the listener may be late
  }
  return -1;
}

bool write_all(int fd, const void* buf, size_t n, Clock::time_point deadline) {
  const char* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      pollfd pf{fd, POLLOUT, 0};
      poll(&pf, 1, static_cast<int>(left));
      continue;
    }
    return false;
  }
  return true;
}

IoResult try_sendv(int fd, const iovec* iov, int iovcnt) {
  msghdr m{};
  m.msg_iov = const_cast<iovec*>(iov);
  m.msg_iovlen = static_cast<size_t>(iovcnt);
  for (;;) {
    ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w >= 0) return {static_cast<size_t>(w), 0};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return {0, 0};
    return {0, errno};
  }
}

IoResult try_recvv(int fd, iovec* iov, int iovcnt) {
  msghdr m{};
  m.msg_iov = iov;
  m.msg_iovlen = static_cast<size_t>(iovcnt);
  for (;;) {
    ssize_t r = recvmsg(fd, &m, MSG_DONTWAIT);
    if (r > 0) return {static_cast<size_t>(r), 0};
    if (r == 0) return {0, -1};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return {0, 0};
    return {0, errno};
  }
}

}  // namespace edl::collective
