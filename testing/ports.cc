#include "testing/ports.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>

namespace edl::testing {

std::vector<int> free_ports(int n) {
  std::vector<int> fds, ports;
  for (int i = 0; i < n; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(sa);
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
      if (fd >= 0) close(fd);
      for (int f : fds) close(f);
      throw std::runtime_error("free_ports: cannot bind 127.0.0.1:0");
    }
    fds.push_back(fd);
    ports.push_back(ntohs(sa.sin_port));
  }
  for (int fd : fds) close(fd);
  return ports;
}

int free_port() { return free_ports(1)[0]; }

}  // namespace edl::testing
