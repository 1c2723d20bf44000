// Network-namespace link emulation (see netns.h): namespace/veth/bridge/tc setup through `ip` and
// `tc`, cleanup on every exit path, and the TCP probes that check the emulated links.
#include "netns.h"

#include "process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <future>
#include <iostream>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace edl::testing {

namespace {

// --- cleanup registry: async-signal-safe removal of /run/netns/<name> --------------------------
constexpr int kMaxNs = 256;
constexpr size_t kPathLen = 96;
char g_paths[kMaxNs][kPathLen];
std::atomic<int> g_used{0};
std::mutex g_mu;  // guards registration (not used by the signal handler)
struct sigaction g_old[NSIG];

void remove_all_registered() {
  int n = g_used.load();
  for (int i = n - 1; i >= 0; --i) {
    if (g_paths[i][0] == '\0') continue;
    umount2(g_paths[i], MNT_DETACH);  // what `ip netns del` does: detach the bind mount ...
    unlink(g_paths[i]);               // ... and remove the file; the namespace dies with its last user
    g_paths[i][0] = '\0';
  }
}

void on_signal(int sig) {
  remove_all_registered();
  sigaction(sig, &g_old[sig], nullptr);
  raise(sig);
}

// Installs the handlers unless they are already ours (someone may have replaced them since the
// last cluster was built, e.g. a test framework restoring its own handlers).
void install_cleanup() {
  static bool atexit_done = false;
  if (!atexit_done) {
    atexit_done = true;
    std::atexit(remove_all_registered);
  }
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
    struct sigaction cur {};
    sigaction(sig, nullptr, &cur);
    if (cur.sa_handler == on_signal) continue;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, &g_old[sig]);
  }
}

void register_ns(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_mu);
  std::string path = "/run/netns/" + name;
  if (path.size() >= kPathLen) throw std::logic_error("netns name too long: " + name);
  int i = g_used.load();
  if (i >= kMaxNs) throw std::runtime_error("too many emulated namespaces in one process");
  std::memcpy(g_paths[i], path.c_str(), path.size() + 1);
  g_used.store(i + 1);
}

void unregister_ns(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_mu);
  std::string path = "/run/netns/" + name;
  for (int i = 0; i < g_used.load(); ++i) {
    if (path == g_paths[i]) g_paths[i][0] = '\0';
  }
}

std::string join(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

void check(const std::vector<std::string>& argv) {
  CommandResult r = run_command(argv);
  if (r.status != 0) {
    throw std::runtime_error("netns: `" + join(argv) + "` failed (status " + std::to_string(r.status) + "): " + r.output);
  }
}

std::string fmt_num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// SIGKILLs every process in namespace `name`, again until none is left (one of them may start
// another between the listing and the kill).
void kill_in(const std::string& name) {
  for (int round = 0; round < 100; ++round) {
    CommandResult r = run_command({"ip", "netns", "pids", name});
    int n = 0;
    for (size_t p = 0; p < r.output.size();) {
      size_t end = r.output.find('\n', p);
      if (end == std::string::npos) end = r.output.size();
      long pid = std::strtol(r.output.c_str() + p, nullptr, 10);
      if (pid > 1) {
        ::kill(static_cast<pid_t>(pid), SIGKILL);
        ++n;
      }
      p = end + 1;
    }
    if (n == 0 || r.status != 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

LinkSpec parse_link(const std::string& text) {
  LinkSpec l;
  l.name = text;
  if (text == "loopback") return l;
  std::string rate = text, delay;
  if (auto plus = text.find('+'); plus != std::string::npos) {
    rate = text.substr(0, plus);
    delay = text.substr(plus + 1);
  }
  auto number = [&](const std::string& s, const std::string& unit) -> double {
    if (s.size() <= unit.size() || s.compare(s.size() - unit.size(), unit.size(), unit) != 0) return -1;
    char* end = nullptr;
    std::string num = s.substr(0, s.size() - unit.size());
    double v = std::strtod(num.c_str(), &end);
    return (end && *end == '\0' && v > 0) ? v : -1;
  };
  if (double g = number(rate, "gbit"); g > 0) {
    l.rate_mbit = g * 1000;
  } else if (double m = number(rate, "mbit"); m > 0) {
    l.rate_mbit = m;
  } else {
    throw std::invalid_argument("link '" + text + "': expected loopback or <N>gbit|<N>mbit[+<D>ms]");
  }
  if (!delay.empty()) {
    l.delay_ms = number(delay, "ms");
    if (l.delay_ms <= 0) throw std::invalid_argument("link '" + text + "': bad latency '" + delay + "' (e.g. 0.1ms)");
  }
  return l;
}

std::string NetnsCluster::unsupported_reason() {
  if (geteuid() != 0) return "needs root (network namespaces, veth and tc)";
  if (find_program("ip").empty()) return "the `ip` program (iproute2) is not installed";
  if (find_program("tc").empty()) return "the `tc` program (iproute2) is not installed";
  std::string probe = "edlns" + std::to_string(getpid()) + "-probe";
  CommandResult r = run_command({"ip", "netns", "add", probe});
  if (r.status != 0) return "cannot create a network namespace here: " + r.output;
  run_command({"ip", "netns", "del", probe});
  return "";
}

int NetnsCluster::remove_stale() {
  DIR* d = opendir("/run/netns");
  if (!d) return 0;
  std::vector<std::string> stale;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.rfind("edlns", 0) != 0) continue;
    long pid = std::strtol(name.c_str() + 5, nullptr, 10);
    if (pid > 0 && kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) stale.push_back(name);
  }
  closedir(d);
  for (const auto& n : stale) {
    kill_in(n);  // e.g. the daemonized slurmstepd of a SlurmCluster whose process was SIGKILLed
    run_command({"ip", "netns", "del", n});
  }
  return static_cast<int>(stale.size());
}

int NetnsCluster::count_own() {
  int n = 0;
  std::string prefix = "edlns" + std::to_string(getpid()) + "-";
  if (DIR* d = opendir("/run/netns")) {
    while (dirent* e = readdir(d)) n += std::string(e->d_name).rfind(prefix, 0) == 0;
    closedir(d);
  }
  return n;
}

NetnsCluster::NetnsCluster(int workers, const LinkSpec& link) : link_(link) {
  if (workers < 1 || workers > 200) throw std::invalid_argument("NetnsCluster: workers must be 1..200");
  install_cleanup();
  try {
    create(workers);
  } catch (...) {
    destroy();
    throw;
  }
}

NetnsCluster::~NetnsCluster() { destroy(); }

void NetnsCluster::create(int workers) {
  static std::atomic<int> counter{0};
  std::string base = "edlns" + std::to_string(getpid()) + "-" + std::to_string(counter++);
  switch_ = base + "s";
  register_ns(switch_);
  check({"ip", "netns", "add", switch_});
  check({"ip", "-n", switch_, "link", "set", "lo", "up"});
  check({"ip", "-n", switch_, "link", "add", "br0", "type", "bridge"});
  check({"ip", "-n", switch_, "addr", "add", switch_address() + "/24", "dev", "br0"});
  check({"ip", "-n", switch_, "link", "set", "br0", "up"});
  for (int i = 0; i < workers; ++i) {
    std::string w = base + "w" + std::to_string(i), port = "p" + std::to_string(i);
    register_ns(w);
    workers_.push_back(w);
    check({"ip", "netns", "add", w});
    check({"ip", "-n", switch_, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", w});
    check({"ip", "-n", switch_, "link", "set", port, "master", "br0"});
    check({"ip", "-n", switch_, "link", "set", port, "up"});
    check({"ip", "-n", w, "link", "set", "lo", "up"});
    check({"ip", "-n", w, "addr", "add", address(i) + "/24", "dev", "eth0"});
    check({"ip", "-n", w, "link", "set", "eth0", "up"});
    shape(w, "eth0", true);        // worker -> switch: bandwidth + latency
    shape(switch_, port, false);   // switch -> worker: bandwidth
  }
}

void NetnsCluster::shape(const std::string& ns, const std::string& dev, bool add_delay) {
  bool delay = add_delay && link_.delay_ms > 0 && latency_ok_;
  if (link_.rate_mbit > 0) {
    // Burst: 1 ms at line rate, at least 64 KiB plus a frame, so large GSO frames pass unsplit.
    double bytes_per_ms = link_.rate_mbit * 1e6 / 8 / 1000;
    long burst = std::max<long>(static_cast<long>(bytes_per_ms), 65536 + 1514);
    check({"tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "tbf", "rate",
           fmt_num(link_.rate_mbit) + "mbit", "burst", std::to_string(burst), "latency", "50ms"});
  }
  if (!delay) return;
  std::vector<std::string> argv = {"tc", "-n", ns, "qdisc", "add", "dev", dev};
  if (link_.rate_mbit > 0) {
    argv.insert(argv.end(), {"parent", "1:1", "handle", "10:"});
  } else {
    argv.insert(argv.end(), {"root", "handle", "1:"});
  }
  argv.insert(argv.end(), {"netem", "delay", fmt_num(link_.delay_ms) + "ms", "limit", "100000"});
  CommandResult r = run_command(argv);
  if (r.status != 0) {
    latency_ok_ = false;
    std::cerr << "netns: cannot add " << link_.delay_ms << " ms latency (" << r.output.substr(0, r.output.find('\n'))
              << "; this kernel lacks sch_netem?): links are bandwidth-limited only\n";
  }
}

void NetnsCluster::destroy() noexcept {
  std::vector<std::string> all = workers_;
  if (!switch_.empty()) all.push_back(switch_);
  for (const auto& n : all) {
    try {
      CommandResult r = run_command({"ip", "netns", "del", n});
      if (r.status != 0) {  // fall back to what `ip netns del` does
        std::string path = "/run/netns/" + n;
        umount2(path.c_str(), MNT_DETACH);
        unlink(path.c_str());
      }
      unregister_ns(n);
    } catch (...) {
    }
  }
  workers_.clear();
  switch_.clear();
}

std::string NetnsCluster::address(int i) const {
  if (i < 0 || i >= size()) throw std::out_of_range("NetnsCluster::address: no worker " + std::to_string(i));
  return "10.77.0." + std::to_string(i + 1);
}

std::vector<std::string> NetnsCluster::exec_prefix(int i) const { return {"ip", "netns", "exec", ns(i)}; }

std::string NetnsCluster::effective_label() const {
  if (link_.rate_mbit <= 0 && link_.delay_ms <= 0) return link_.name;
  std::string s = link_.rate_mbit >= 1000 ? fmt_num(link_.rate_mbit / 1000) + "gbit" : fmt_num(link_.rate_mbit) + "mbit";
  if (link_.delay_ms > 0 && latency_ok_) s += "+" + fmt_num(link_.delay_ms) + "ms";
  return s;
}

void NetnsCluster::enter(const std::string& name) {
  std::string path = "/run/netns/" + name;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("netns: cannot open " + path + ": " + std::strerror(errno));
  int rc = setns(fd, CLONE_NEWNET);
  int err = errno;
  close(fd);
  if (rc != 0) throw std::runtime_error("netns: setns(" + name + ") failed: " + std::strerror(err));
}

// --- faults -----------------------------------------------------------------------------------

void NetnsCluster::kill_all(int i) const { kill_in(i == size() ? switch_ : ns(i)); }

void NetnsCluster::set_link(int i, bool up) const {
  if (i < 0 || i >= size()) throw std::out_of_range("NetnsCluster::set_link: no worker " + std::to_string(i));
  check({"ip", "-n", switch_, "link", "set", "p" + std::to_string(i), up ? "up" : "down"});
}

bool NetnsCluster::wait_listening(const std::string& addr, int port, double timeout_ms) const {
  bool ok = false;
  std::thread t([&] {  // a thread of its own: enter() moves only the calling thread
    enter(switch_);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(static_cast<int64_t>(timeout_ms * 1000));
    while (!ok && std::chrono::steady_clock::now() < deadline) {
      int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in sa{};
      sa.sin_family = AF_INET;
      sa.sin_port = htons(static_cast<uint16_t>(port));
      inet_pton(AF_INET, addr.c_str(), &sa.sin_addr);
      ok = connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
      close(fd);
      if (!ok) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  t.join();
  return ok;
}

// --- probes -----------------------------------------------------------------------------------

namespace {

constexpr int kProbeTimeoutMs = 10000;

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

void set_timeouts(int fd) {
  timeval tv{kProbeTimeoutMs / 1000, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

sockaddr_in make_addr(const std::string& ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (inet_pton(AF_INET, ip.c_str(), &a.sin_addr) != 1) throw std::runtime_error("bad address " + ip);
  return a;
}

void fail(const std::string& what) { throw std::runtime_error("netns probe: " + what + ": " + std::strerror(errno)); }

// Runs `server(conn_fd)` in namespace `to` and `client(fd)` in namespace `from`, connected by TCP.
template <typename S, typename C>
void with_connection(const NetnsCluster& c, int from, int to, S server, C client) {
  std::promise<uint16_t> port_p;
  auto port_f = port_p.get_future();
  auto srv = std::async(std::launch::async, [&] {
    bool sent = false;
    try {
      NetnsCluster::enter(c.ns(to));
      Fd ls{socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
      if (ls.fd < 0) fail("socket");
      sockaddr_in a = make_addr(c.address(to), 0);
      if (bind(ls.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) fail("bind " + c.address(to));
      if (listen(ls.fd, 1) != 0) fail("listen");
      socklen_t len = sizeof a;
      getsockname(ls.fd, reinterpret_cast<sockaddr*>(&a), &len);
      port_p.set_value(ntohs(a.sin_port));
      sent = true;
      pollfd p{ls.fd, POLLIN, 0};
      if (poll(&p, 1, kProbeTimeoutMs) != 1) throw std::runtime_error("netns probe: no connection within 10 s");
      Fd conn{accept4(ls.fd, nullptr, nullptr, SOCK_CLOEXEC)};
      if (conn.fd < 0) fail("accept");
      set_timeouts(conn.fd);
      server(conn.fd);
    } catch (...) {
      if (!sent) port_p.set_exception(std::current_exception());
      throw;
    }
  });
  std::exception_ptr client_error;
  try {
    if (port_f.wait_for(std::chrono::milliseconds(kProbeTimeoutMs)) != std::future_status::ready) {
      throw std::runtime_error("netns probe: server did not start within 10 s");
    }
    uint16_t port = port_f.get();
    auto cli = std::async(std::launch::async, [&] {
      NetnsCluster::enter(c.ns(from));
      Fd s{socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
      if (s.fd < 0) fail("socket");
      set_timeouts(s.fd);
      sockaddr_in a = make_addr(c.address(to), port);
      if (connect(s.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) fail("connect " + c.address(to));
      client(s.fd);
    });
    cli.get();
  } catch (...) {
    client_error = std::current_exception();
  }
  srv.wait();  // bounded: every server wait has a 10 s timeout
  if (client_error) std::rethrow_exception(client_error);
  srv.get();
}

void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("send");
    p += w;
    n -= static_cast<size_t>(w);
  }
}

size_t read_some(int fd, char* p, size_t n) {
  for (;;) {
    ssize_t r = recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail("recv");
    return static_cast<size_t>(r);
  }
}

}  // namespace

double probe_throughput_gbit(const NetnsCluster& c, int from, int to, size_t bytes) {
  double seconds = 0;
  with_connection(
      c, from, to,
      [&](int fd) {
        std::vector<char> buf(1 << 20);
        size_t got = 0;
        while (got < bytes) {
          size_t r = read_some(fd, buf.data(), buf.size());
          if (r == 0) throw std::runtime_error("netns probe: sender closed early");
          got += r;
        }
        char ack = 1;
        write_all(fd, &ack, 1);
      },
      [&](int fd) {
        std::vector<char> buf(1 << 20, 'x');
        auto t0 = std::chrono::steady_clock::now();
        for (size_t sent = 0; sent < bytes;) {
          size_t n = std::min(buf.size(), bytes - sent);
          write_all(fd, buf.data(), n);
          sent += n;
        }
        char ack = 0;
        if (read_some(fd, &ack, 1) != 1) throw std::runtime_error("netns probe: no acknowledgement");
        seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      });
  return bytes * 8.0 / seconds / 1e9;
}

double probe_rtt_us(const NetnsCluster& c, int from, int to, int rounds) {
  std::vector<double> us;
  with_connection(
      c, from, to,
      [&](int fd) {
        char b;
        for (int i = 0; i < rounds; ++i) {
          if (read_some(fd, &b, 1) != 1) throw std::runtime_error("netns probe: peer closed");
          write_all(fd, &b, 1);
        }
      },
      [&](int fd) {
        char b = 'p';
        for (int i = 0; i < rounds; ++i) {
          auto t0 = std::chrono::steady_clock::now();
          write_all(fd, &b, 1);
          if (read_some(fd, &b, 1) != 1) throw std::runtime_error("netns probe: peer closed");
          us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
        }
      });
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

}  // namespace edl::testing
