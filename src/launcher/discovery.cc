#include "launcher/discovery.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <sstream>

#include "common/spawn.h"

namespace edl::launcher {

DiscoveryResult parse_discovery(const std::string& output) {
  DiscoveryResult d;
  std::istringstream in(output);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    size_t a = line.find_first_not_of(" \t\r");
    if (a == std::string::npos || line[a] == '#') continue;
    size_t b = line.find_last_not_of(" \t\r");
    line = line.substr(a, b - a + 1);
    std::string host = line;
    int slots = 1;
    size_t colon = line.rfind(':');
    if (colon != std::string::npos) {
      host = line.substr(0, colon);
      std::string s = line.substr(colon + 1);
      if (s.empty() || s.size() > 6 || s.find_first_not_of("0123456789") != std::string::npos) {
        d.error = "line " + std::to_string(n) + " '" + line + "' is not HOST:SLOTS";
        return d;
      }
      slots = std::stoi(s);
    }
    if (host.empty() || host.find_first_of(" \t") != std::string::npos) {
      d.error = "line " + std::to_string(n) + " '" + line + "' has no valid host name";
      return d;
    }
    d.hosts[host] += slots;
  }
  d.ok = true;
  return d;
}

DiscoveryResult run_discovery(const std::string& script, int timeout_ms, const std::atomic<bool>* cancel) {
  DiscoveryResult d;
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    d.error = "pipe failed";
    return d;
  }
  edl::ExecSpec spec;
  spec.argv = {"/bin/sh", "-c", script};
  spec.inherit_env = true;
  spec.stdout_fd = out[1];
  const pid_t pid = edl::fork_exec(spec);
  if (pid < 0) {
    ::close(out[0]);
    ::close(out[1]);
    d.error = "fork failed";
    return d;
  }
  ::close(out[1]);
  std::string text;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  bool timed_out = false, cancelled = false;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    if (cancel && cancel->load()) {
      cancelled = true;
      break;
    }
    pollfd p{out[0], POLLIN, 0};
    int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 100)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char buf[4096];
    ssize_t n = ::read(out[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > (1u << 20)) break;  // absurd output: stop reading
  }
  ::close(out[0]);
  if (timed_out || cancelled) {
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
  }
  int status = 0;
  bool reaped = false;
  // The script closed stdout (or we killed it): it ends promptly; bound the wait anyway.
  for (int i = 0; i < 300 && !reaped; ++i) {
    reaped = waitpid(pid, &status, WNOHANG) == pid;
    if (reaped) break;
    if (i == 100) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
    }
    usleep(10000);
  }
  if (!reaped) {
    d.error = "did not exit after closing its output";
    return d;
  }
  if (timed_out) {
    d.error = "timed out after " + std::to_string(timeout_ms) + " ms";
    return d;
  }
  if (cancelled) {
    d.error = "cancelled";
    return d;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    d.error = "exited with status " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    return d;
  }
  return parse_discovery(text);
}

int local_slots(const DiscoveryResult& d, const std::string& hostname) {
  int n = 0;
  for (const auto& kv : d.hosts)
    if (kv.first == hostname || kv.first == "localhost" || kv.first == "127.0.0.1") n += kv.second;
  return n;
}

}  // namespace edl::launcher
