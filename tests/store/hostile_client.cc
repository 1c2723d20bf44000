#include "store/hostile_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store/loopback.h"

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "elastic/store/tcp_store_auth.h"
#include "elastic/store/tcp_store_frame.h"
#include "testing/process.h"

namespace edl::test {
namespace {

namespace st = edl::store;

int connect_to(int port) { return edl::test::connect_loopback(port); }

void send_all(int fd, const std::string& b) {
  size_t off = 0;
  while (off < b.size()) {
    ssize_t w = ::send(fd, b.data() + off, b.size() - off, MSG_NOSIGNAL);
    if (w <= 0) return;
    off += static_cast<size_t>(w);
  }
}

std::string le32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = char(v >> (8 * i));
  return s;
}

[[noreturn]] void flood(int port, int signal_fd) {
  std::mt19937 rng(1234);
  for (;;) {
    std::vector<int> fds;
    for (int i = 0; i < 1000; ++i) {
      int fd = connect_to(port);
      if (fd < 0) continue;
      fds.push_back(fd);
      switch (i % 4) {
        case 0:
          send_all(fd, le32(0xFFFFFFFFu) + std::string(1024, 'A'));
          break;
        case 1: {
          std::string junk(8192, '\0');
          for (auto& ch : junk) ch = static_cast<char>(rng());
          send_all(fd, junk);
          break;
        }
        case 2: {
          st::Message auth;
          auth.op = st::Op::kAuth;
          auth.value = st::auth_mac("wrong-secret", std::string(st::kNonceBytes, 'n'));
          send_all(fd, st::encode_frame(auth));
          break;
        }
        default:
          break;  // silent: holds a handshake slot
      }
    }
    for (int fd : fds) close(fd);
    if (write(signal_fd, "r", 1) != 1) _exit(1);
  }
}

}  // namespace

Flood start_flood(int port) {
  Flood f;
  int p[2];
  if (pipe(p) != 0) return f;
  edl::testing::SpawnOptions o;
  o.own_group = false;
  o.die_with_parent = true;
  f.pid = edl::testing::fork_call(
      [&] {
        close(p[0]);
        flood(port, p[1]);
        return 0;
      },
      o);
  close(p[1]);
  f.rounds_fd = p[0];
  return f;
}

bool wait_round(const Flood& f) {
  char c = 0;
  return read(f.rounds_fd, &c, 1) == 1;
}

void stop_flood(Flood& f) {
  if (f.pid > 0) {
    kill(f.pid, SIGKILL);
    waitpid(f.pid, nullptr, 0);
  }
  if (f.rounds_fd >= 0) close(f.rounds_fd);
  f = Flood{};
}

long rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

}  // namespace edl::test
