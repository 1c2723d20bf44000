#include "chaos_job.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

#include "common/bench_util.h"
#include "common/host_port.h"
#include "testing/process.h"

namespace edl::bench::chaos {

namespace {
volatile sig_atomic_t g_running_job = 0;  // edl-run of the running job, for on_signal
}

void on_signal(int sig) {
  if (g_running_job > 0) ::kill(g_running_job, SIGKILL);  // its workers die too (PR_SET_PDEATHSIG)
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

// --- EventLog -------------------------------------------------------------------------------------

bool EventLog::parse_own(const std::string& kind, const std::string& line) {
  std::istringstream is(line);
  std::string skip;
  is >> skip;
  if (kind == "gen") {
    GenLine g;
    is >> g.worker >> g.gen >> g.rank >> g.size >> g.t;
    if (is) gens.push_back(g);
    return true;
  }
  if (kind == "selfkill") {
    SelfKill k;
    is >> k.worker >> k.phase >> k.rank >> k.t;
    selfkills.push_back(k);
    return true;
  }
  if (kind == "start" && store_url.empty()) {  // "start <worker> <pid> <t> <store url or ->"
    std::string w, p, t, url;
    is >> w >> p >> t >> url;
    if (!url.empty() && url != "-") store_url = url;
  }
  return false;  // the common reader takes the rest of a start line, and the other kinds
}

// --- ChaosJob -------------------------------------------------------------------------------------

ChaosJob::ChaosJob(const JobConfig& cfg) : cfg_(cfg), log_(cfg.dir + "/log") {
  set_slots(cfg.np);
  const std::string script = cfg.dir + "/discover.sh";
  write_file(script, "#!/bin/sh\ncat " + cfg.dir + "/hosts\n");
  ::chmod(script.c_str(), 0755);
  std::vector<std::string> argv = {cfg.edl_run, "--min-np", "1", "--max-np", std::to_string(cfg.max_np),
                                   "--host-discovery-script", script, "--discovery-interval-ms", "100",
                                   "--blacklist-cooldown-range", "0,0", "--pid-file", cfg.dir + "/pids",
                                   "--grace-period", "10", "--rendezvous-timeout", "30", "--hostname", "localhost",
                                   "--job-id", cfg.job_id};
  if (!cfg.store.empty()) {
    argv.push_back("--store");
    argv.push_back(cfg.store);
  }
  argv.push_back(cfg.worker);
  argv.push_back("--dir");
  argv.push_back(cfg.dir);
  for (const auto& a : cfg.worker_args) argv.push_back(a);
  const std::string out = cfg.dir + "/edl-run.log";
  edl::testing::SpawnOptions o;
  o.log = out;
  o.own_group = true;
  if (cfg.timeout_ms > 0) o.env.push_back("EDL_TIMEOUT_MS=" + std::to_string(cfg.timeout_ms));
  // Commits are also persisted, as a production job would: a schedule that stops or sticks every
  // member resumes from the checkpoint instead of failing with "all members lost".
  o.env.push_back("EDL_CHECKPOINT_DIR=" + cfg.dir + "/ckpt");
  pid_ = edl::testing::spawn(argv, o);
  g_running_job = pid_;
}

ChaosJob::~ChaosJob() { kill_all(); }

int ChaosJob::poll() {
  if (status_ >= 0 || pid_ <= 0) return status_;
  int st = 0;
  if (::waitpid(pid_, &st, WNOHANG) == pid_) status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return status_;
}

void ChaosJob::set_slots(int n) {
  slots_ = n;
  write_file(cfg_.dir + "/hosts", "localhost:" + std::to_string(n) + "\n");
}

void ChaosJob::write_marker(const std::string& name, int rank) {
  write_file(cfg_.dir + "/" + name, std::to_string(rank) + "\n");
}

bool ChaosJob::ours(pid_t pid) {
  if (pid <= 1) return false;
  std::string cmd = slurp("/proc/" + std::to_string(pid) + "/cmdline");
  for (char& c : cmd)
    if (c == '\0') c = ' ';
  return cmd.find("chaos_worker") != std::string::npos && cmd.find(" " + cfg_.dir + " ") != std::string::npos;
}

bool ChaosJob::signal(pid_t pid, int sig) {
  if (!ours(pid)) return false;
  return ::kill(pid, sig) == 0;
}

std::vector<Member> ChaosJob::members() {
  log_.poll();
  std::vector<Member> out;
  if (log_.steps.empty()) return out;
  const uint64_t g = log_.steps.back().gen;
  std::map<std::string, Member> m;
  for (auto it = log_.steps.rbegin(); it != log_.steps.rend() && it->gen == g; ++it) {
    if (m.count(it->worker)) continue;
    auto p = log_.pid.find(it->worker);
    if (p == log_.pid.end() || parent_of(p->second) != pid_) continue;
    m[it->worker] = Member{it->worker, p->second, it->rank, it->size};
  }
  for (auto& [w, mem] : m) out.push_back(mem);
  return out;
}

void ChaosJob::kill_all() {
  if (pid_ > 0) {
    g_running_job = 0;
    if (poll() < 0) {
      ::kill(pid_, SIGTERM);
      for (int i = 0; i < 40 && poll() < 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (poll() < 0) {
        ::kill(pid_, SIGKILL);  // its workers get SIGKILL too (PR_SET_PDEATHSIG)
        int st;
        ::waitpid(pid_, &st, 0);
        status_ = 137;
      }
    }
    pid_ = -1;
  }
  log_.poll();
  for (auto& [w, p] : log_.pid)
    if (ours(p)) ::kill(p, SIGKILL);  // stragglers, stopped ones included (SIGKILL ends them too)
}

// --- HostileClient --------------------------------------------------------------------------------

bool HostileClient::start(const std::string& url, std::string* why) {
  if (thread_.joinable()) {
    *why = "a hostile client already runs";
    return false;
  }
  auto scheme = url.find("://");
  std::string rest = scheme == std::string::npos ? url : url.substr(scheme + 3);
  std::string host;
  int port = 0;
  if (!split_host_port(rest, &host, &port).empty() || (host != "127.0.0.1" && host != "localhost")) {
    *why = "the store '" + url + "' is not on loopback: no hostile client";
    return false;
  }
  stop_ = false;
  thread_ = std::thread([this, port] { run(port); });
  return true;
}

void HostileClient::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void HostileClient::run(int port) {
  auto connect_one = [&]() -> int {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd);
      return -1;
    }
    ++connections_;
    return fd;
  };
  auto send_all = [](int fd, const void* p, size_t n) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
  };
  std::vector<int> held;
  std::mt19937 rng(12345);
  // 1. garbage, then close
  for (int i = 0; i < 4; ++i) {
    int fd = connect_one();
    if (fd < 0) continue;
    std::string junk(16384, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    send_all(fd, junk.data(), junk.size());
    ::close(fd);
  }
  // 2. a frame header announcing a 4 GiB body, then a few bytes, held open
  if (int fd = connect_one(); fd >= 0) {
    uint32_t len = 0xFFFFFFFFu;
    send_all(fd, &len, sizeof len);
    send_all(fd, "abcd", 4);
    held.push_back(fd);
  }
  // 3. a plausible small frame cut in the middle, held open
  if (int fd = connect_one(); fd >= 0) {
    uint32_t len = 64;
    send_all(fd, &len, sizeof len);
    send_all(fd, "\x01\x02\x03", 3);
    held.push_back(fd);
  }
  // 4. many idle connections
  for (int i = 0; i < 64 && !stop_; ++i)
    if (int fd = connect_one(); fd >= 0) held.push_back(fd);
  // 5. a slow client: one byte every 100 ms until stop()
  int slow = connect_one();
  while (!stop_) {
    if (slow >= 0) send_all(slow, "x", 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (slow >= 0) ::close(slow);
  for (int fd : held) ::close(fd);
}

}  // namespace edl::bench::chaos
