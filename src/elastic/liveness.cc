// Liveness probe sockets and lease values (docs/elastic.md, "Rendezvous", step 4).
#include "elastic/liveness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <sstream>

#include "common/host_port.h"

namespace edl::elastic {

LeaseValue parse_lease(const std::string& v) {
  LeaseValue out;
  std::istringstream is(v);
  std::string beat, host, wall, probe;
  is >> beat >> host >> wall >> probe;
  out.host = host;
  try {
    if (!wall.empty()) out.wall = std::stoll(wall);
    std::string probe_host;
    int probe_port = 0;
    if (!probe.empty() && split_host_port(probe, &probe_host, &probe_port).empty()) {
      out.probe_addr = probe_host;
      out.probe_port = probe_port;
    }
  } catch (const std::exception&) {
  }
  return out;
}

// Opens the liveness probe: a listening socket that exists exactly as long as the process. A
// connect to it is refused at once when the process died (the kernel closed it); a stopped process
// still accepts in the kernel, so SIGSTOP is left to the heartbeat rule. The backlog is the system's
// largest: in a large job many members may probe one worker between two drains of its beat thread,
// and a connect whose SYN finds the backlog full waits (proving nothing) instead of being refused.
// Returns -1 on failure.
int open_probe(const std::string& bind_address, int* port) {
  in_addr a{};
  if (::inet_pton(AF_INET, bind_address.c_str(), &a) != 1) return -1;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr = a;
  sa.sin_port = 0;
  socklen_t len = sizeof(sa);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 || ::listen(fd, SOMAXCONN) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    ::close(fd);
    return -1;
  }
  *port = ntohs(sa.sin_port);
  return fd;
}

// True when a connect to the probe is refused (the process is gone). Anything else — accepted,
// timed out, unreachable — proves nothing and returns false.
bool probe_refused(const LeaseValue& v, const std::string& my_host) {
  if (v.probe_port <= 0) return false;
  // A loopback probe means something only on the member's own host.
  if (v.probe_addr.compare(0, 4, "127.") == 0 && v.host != my_host) return false;
  in_addr a{};
  if (::inet_pton(AF_INET, v.probe_addr.c_str(), &a) != 1) return false;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr = a;
  sa.sin_port = htons(static_cast<uint16_t>(v.probe_port));
  bool refused = false;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    if (errno == ECONNREFUSED) {
      refused = true;
    } else if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, 50) == 1) {
        int err = 0;
        socklen_t el = sizeof(err);
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
        refused = err == ECONNREFUSED;
      }
    }
  }
  ::close(fd);
  return refused;
}

bool probe_refused(const std::string& host, const std::string& probe, const std::string& my_host) {
  if (probe.empty()) return false;
  return probe_refused(parse_lease("0 " + host + " 0 " + probe), my_host);
}

}  // namespace edl::elastic
