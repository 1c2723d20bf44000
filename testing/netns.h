// NetnsCluster: emulated hosts and cluster links on one machine, for benches (scaling_bench,
// optimizer_bench) and multi-host tests (tests/testing/netns_test.cc). Each worker gets
// its own network namespace with one veth "eth0" (address 10.77.0.<i+1>/24) plugged into a bridge
// that lives in a further private "switch" namespace (address 10.77.0.254 on the bridge), so
// nothing is created in, or routed to, the caller's own network namespace. `tc` shapes every veth
// end in both directions (tbf for bandwidth; netem for added latency when the kernel has sch_netem).
//
// Root only. Everything is removed by the destructor, by SIGINT/SIGTERM/SIGHUP/SIGQUIT handlers and at
// exit; names carry the creating pid (edlns<pid>s, edlns<pid>w<i>) and remove_stale() deletes the
// namespaces of helpers that died by SIGKILL.
//
// Thread-safety: construct and destroy from one thread; the accessors and enter() may be used from
// any thread (enter() only moves the calling thread).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace edl::testing {

struct LinkSpec {
  std::string name = "loopback";  // label used in bench rows
  double rate_mbit = 0;           // per direction per worker; 0 = not shaped
  double delay_ms = 0;            // one-way added latency (needs sch_netem)
};

// "loopback", "1gbit", "10gbit", "100mbit", optionally "+<ms>ms" (e.g. "1gbit+0.1ms").
// Throws std::invalid_argument naming the text.
LinkSpec parse_link(const std::string& text);

class NetnsCluster {
 public:
  // "" when this process can build namespaces, else why not (not root, `ip`/`tc` missing, ...).
  static std::string unsupported_reason();
  // Deletes edlns<pid>* namespaces whose creating process no longer exists, after SIGKILLing the
  // processes left in them; returns how many.
  static int remove_stale();
  // Namespaces this process created that still exist (0 once every cluster it built is gone).
  static int count_own();

  // Creates `workers` namespaces joined by a shaped bridge. Throws std::runtime_error with the
  // failing command and its output; whatever was created before the failure is removed.
  NetnsCluster(int workers, const LinkSpec& link);
  ~NetnsCluster();
  NetnsCluster(const NetnsCluster&) = delete;
  NetnsCluster& operator=(const NetnsCluster&) = delete;

  int size() const { return static_cast<int>(workers_.size()); }
  const std::string& ns(int i) const { return workers_.at(i); }
  const std::string& switch_ns() const { return switch_; }
  std::string address(int i) const;  // 10.77.0.<i+1>
  static std::string switch_address() { return "10.77.0.254"; }
  // argv prefix that runs a command in worker i's namespace: {"ip", "netns", "exec", ns(i)}.
  std::vector<std::string> exec_prefix(int i) const;
  // False when latency was asked for but the kernel has no sch_netem (bandwidth is still shaped).
  bool latency_emulated() const { return latency_ok_; }
  // The link actually emulated, e.g. "1gbit+0.1ms", or "1gbit" when latency could not be added.
  std::string effective_label() const;

  // Moves the calling thread into namespace `name` (sockets it creates afterwards live there).
  static void enter(const std::string& name);

  // --- faults and probes of emulated hosts (EmulatedHosts, SlurmCluster) ----------------------------
  // SIGKILLs every process in namespace i (`ip netns pids`), again until none is left (one of them
  // may start another between the listing and the kill).
  void kill_all(int i) const;
  // Takes worker i's switch-side veth end down (packets to and from it are dropped silently in both
  // directions, as after a power loss or a cut cable) or up again. Throws std::runtime_error.
  void set_link(int i, bool up) const;
  // True once something accepts TCP connections on addr:port, connecting from the switch namespace
  // every 50 ms; false after timeout_ms.
  bool wait_listening(const std::string& addr, int port, double timeout_ms) const;

 private:
  void create(int workers);
  void shape(const std::string& ns, const std::string& dev, bool add_delay);
  void destroy() noexcept;

  LinkSpec link_;
  std::string switch_;
  std::vector<std::string> workers_;
  bool latency_ok_ = true;
};

// Link probes (used by tests and netns_check): TCP bulk throughput in Gbit/s from worker `from` to
// worker `to`, and median TCP round trip in microseconds of 1-byte ping-pongs. Every socket wait is
// bounded (10 s); failures throw std::runtime_error.
double probe_throughput_gbit(const NetnsCluster& c, int from, int to, size_t bytes);
double probe_rtt_us(const NetnsCluster& c, int from, int to, int rounds);

}  // namespace edl::testing
