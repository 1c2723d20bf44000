// EmulatedHosts (see emulated_hosts.h): process start-up inside namespaces, the stores, faults,
// and cleanup on every path.
#include "testing/emulated_hosts.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "testing/etcd_cluster.h"

namespace edl::testing {
namespace {

constexpr int kRedisPort = 6379;
constexpr int kEmbeddedPort = 29400;
constexpr int kEtcdClientPort = 2379;
constexpr int kEtcdPeerPort = 2380;

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// Decodes a waitpid status the way edl-run reports its own: code, or 128 + signal.
int code_of(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

std::string etcd_endpoints(const NetnsCluster& net, int hosts) {
  std::string s;
  for (int h = 0; h < hosts; ++h)
    s += (h ? "," : "") + net.address(h) + ":" + std::to_string(kEtcdClientPort);
  return s;
}

}  // namespace

double EmulatedHosts::now_ms() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

EmulatedHosts::EmulatedHosts(const EmulatedHostsOptions& options) : options_(options) {
  const int H = options_.hosts;
  if (H < 2 || H > 16) throw std::invalid_argument("EmulatedHosts: hosts must be 2..16, got " + std::to_string(H));
  if (options_.store != "redis" && options_.store != "etcd" && options_.store != "embedded")
    throw std::invalid_argument("EmulatedHosts: store must be redis, etcd or embedded, got '" + options_.store + "'");
  if (options_.edl_run.empty() || options_.worker.empty())
    throw std::invalid_argument("EmulatedHosts: the edl-run and multihost_worker paths are required");
  char tmpl[] = "/tmp/edl-hosts-XXXXXX";
  if (!mkdtemp(tmpl)) throw std::runtime_error(std::string("EmulatedHosts: mkdtemp failed: ") + std::strerror(errno));
  dir_ = tmpl;
  job_id_ = "mh" + std::to_string(getpid()) + "-" + std::to_string(static_cast<long>(now_ms()) % 100000);
  secret_ = "secret-" + job_id_;
  runs_.assign(H, -1);
  exit_ms_.assign(H, -1);
  exit_codes_.assign(H, -1);
  starts_.assign(H, 0);
  etcd_.assign(H, -1);
  try {
    NetnsCluster::remove_stale();
    net_ = std::make_unique<NetnsCluster>(H + (options_.store == "redis" ? 1 : 0), parse_link("loopback"));
    if (options_.store == "redis") {
      start_redis();
      store_url_ = "redis://" + net_->address(H) + ":" + std::to_string(kRedisPort);
    } else if (options_.store == "etcd") {
      for (int h = 0; h < H; ++h) start_etcd(h);
      for (int h = 0; h < H; ++h) wait_tcp(h, net_->address(h), kEtcdClientPort, 20000);
      // etcd accepts connections before it answers: wait (bounded) until the cluster has a leader.
      for (int i = 0; i < 100 && etcd_leader() < 0; ++i) usleep(200 * 1000);
      store_url_ = "etcd://" + etcd_endpoints(*net_, H);
    } else {
      store_url_ = "tcp://" + net_->address(0) + ":" + std::to_string(kEmbeddedPort);
    }
    for (int h = 0; h < H; ++h) {
      start_host(h);
      if (h == 0 && options_.store == "embedded") wait_tcp(0, net_->address(0), kEmbeddedPort, 20000);
    }
  } catch (...) {
    teardown();  // kills what started, removes the namespaces and the directory
    throw;
  }
}

EmulatedHosts::~EmulatedHosts() { teardown(); }

void EmulatedHosts::teardown() noexcept {
  if (net_) {
    for (int i = 0; i < net_->size(); ++i) {
      try {
        kill_namespace(i);
      } catch (const std::exception&) {  // the pids of our own children are killed below anyway
      }
    }
  }
  for (pid_t& p : runs_) {
    if (p > 0) {
      ::kill(-p, SIGKILL);
      waitpid(p, nullptr, 0);
    }
    p = -1;
  }
  for (pid_t* p : {&redis_}) {
    if (*p > 0) {
      ::kill(*p, SIGKILL);
      waitpid(*p, nullptr, 0);
    }
    *p = -1;
  }
  for (pid_t& p : etcd_) {
    if (p > 0) {
      ::kill(p, SIGKILL);
      waitpid(p, nullptr, 0);
    }
    p = -1;
  }
  net_.reset();
  if (!dir_.empty() && !options_.keep_dir) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  dir_.clear();
}

pid_t EmulatedHosts::spawn(int ns_index, const std::vector<std::string>& argv, const std::string& out_path,
                           bool with_job_env) {
  SpawnOptions o;
  o.log = out_path;  // stdout and stderr, appended
  o.append = true;
  o.null_stdin = true;
  o.own_group = true;
  o.die_with_parent = true;
  if (with_job_env) {
    o.env.push_back("EDL_BIND_ADDR=" + net_->address(ns_index));
    for (const auto& e : options_.env) o.env.push_back(e);
  }
  std::vector<std::string> full = net_->exec_prefix(ns_index);
  full.insert(full.end(), argv.begin(), argv.end());
  return edl::testing::spawn(full, o);
}

void EmulatedHosts::kill_namespace(int ns_index) { net_->kill_all(ns_index); }

void EmulatedHosts::wait_tcp(int ns_index, const std::string& addr, int port, double timeout_ms) {
  if (!net_->wait_listening(addr, port, timeout_ms))
    throw std::runtime_error("EmulatedHosts: nothing listens on " + addr + ":" + std::to_string(port) + " (namespace " +
                             std::to_string(ns_index) + ") after " + std::to_string(static_cast<int>(timeout_ms)) +
                             " ms; see " + dir_);
}

void EmulatedHosts::start_host(int h) {
  exit_code(h);
  if (runs_.at(h) > 0) throw std::logic_error("EmulatedHosts::start_host: host " + std::to_string(h) + " runs");
  const int H = options_.hosts;
  std::vector<std::string> a = {options_.edl_run, "--hostname", host_name(h), "--job-id", job_id_, "--secret", secret_,
                                "--min-np", std::to_string(options_.min_np), "--max-np", std::to_string(H * options_.slots),
                                "-np", std::to_string(options_.slots)};
  if (options_.store == "embedded" && h == 0) {
    a.insert(a.end(), {"--store-bind", net_->address(0), "--store-port", std::to_string(kEmbeddedPort)});
  } else {
    a.insert(a.end(), {"--store", store_url_});
  }
  a.insert(a.end(), options_.run_args.begin(), options_.run_args.end());
  a.insert(a.end(), {"--", options_.worker, "--log", dir_ + "/commits.log", "--step-ms", std::to_string(options_.step_ms),
                     "--params", std::to_string(options_.params), "--stop-file", dir_ + "/stop"});
  std::string out = dir_ + "/" + host_name(h) + "." + std::to_string(starts_[h]++) + ".log";
  runs_[h] = spawn(h, a, out, true);
  exit_ms_[h] = -1;
  exit_codes_[h] = -1;
}

CommitLog EmulatedHosts::log() const { return CommitLog::parse(read_text(dir_ + "/commits.log")); }

std::string EmulatedHosts::events(int h) const {
  std::string all;
  for (int i = 0; i < starts_.at(h); ++i) all += read_text(dir_ + "/" + host_name(h) + "." + std::to_string(i) + ".log");
  return all;
}

std::string EmulatedHosts::read_text(const std::string& path) const {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void EmulatedHosts::stop_at(int64_t step) {
  std::string tmp = dir_ + "/stop.tmp";
  {
    std::ofstream out(tmp);
    out << step << "\n";
  }
  std::filesystem::rename(tmp, dir_ + "/stop");
}

int EmulatedHosts::exit_code(int h) {
  pid_t p = runs_.at(h);
  if (p <= 0) return exit_codes_[h];
  int status = 0;
  if (waitpid(p, &status, WNOHANG) != p) return -1;
  runs_[h] = -1;
  exit_codes_[h] = code_of(status);
  exit_ms_[h] = now_ms();
  return exit_codes_[h];
}

int EmulatedHosts::wait_exit(int h, double timeout_ms) {
  double deadline = now_ms() + timeout_ms;
  while (now_ms() < deadline) {
    if (runs_.at(h) <= 0 || exit_code(h) != -1) return exit_codes_[h];
    sleep_ms(20);
  }
  return exit_code(h);
}

double EmulatedHosts::crash_host(int h) {
  double t = cut_link(h);  // first: the peers must not see the kernel close the sockets (no RST, no FIN)
  kill_namespace(h);
  if (runs_.at(h) > 0) {
    int status = 0;
    waitpid(runs_[h], &status, 0);
    exit_codes_[h] = code_of(status);
    exit_ms_[h] = now_ms();
    runs_[h] = -1;
  }
  if (etcd_.at(h) > 0) {
    waitpid(etcd_[h], nullptr, 0);
    etcd_[h] = -1;
  }
  return t;
}

double EmulatedHosts::cut_link(int h) {
  net_->set_link(h, false);
  return now_ms();
}

void EmulatedHosts::heal_link(int h) { net_->set_link(h, true); }

void EmulatedHosts::start_redis() {
  if (options_.store != "redis") throw std::logic_error("EmulatedHosts: the store is not redis");
  const int ns = options_.hosts;
  std::string rdir = dir_ + "/redis";
  std::filesystem::create_directories(rdir);
  // AOF with fsync per write: a restarted server has every key the clients were told was written.
  redis_ = spawn(ns, {"redis-server", "--bind", net_->address(ns), "--port", std::to_string(kRedisPort), "--dir", rdir,
                      "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--requirepass", secret_,
                      "--protected-mode", "no", "--daemonize", "no", "--loglevel", "warning"},
                 dir_ + "/redis.log", false);
  wait_tcp(ns, net_->address(ns), kRedisPort, 20000);
}

double EmulatedHosts::kill_redis() {
  if (redis_ > 0) {
    ::kill(redis_, SIGKILL);
    waitpid(redis_, nullptr, 0);
    redis_ = -1;
  }
  return now_ms();
}

void EmulatedHosts::start_etcd(int h) {
  std::string a = net_->address(h), cluster;
  for (int i = 0; i < options_.hosts; ++i)
    cluster += (i ? "," : "") + ("m" + std::to_string(i)) + "=http://" + net_->address(i) + ":" + std::to_string(kEtcdPeerPort);
  std::string client = "http://" + a + ":" + std::to_string(kEtcdClientPort);
  std::string peer = "http://" + a + ":" + std::to_string(kEtcdPeerPort);
  // --pre-vote: a member cut off by a partition must not depose the majority's leader when the link
  // heals (its raised term would force elections that outlast the store deadline): etcd's pre-vote
  // phase, the default from etcd 3.5 on (docs/multihost.md).
  etcd_.at(h) = spawn(h, etcd_member_command("m" + std::to_string(h), dir_ + "/etcd" + std::to_string(h), client, peer,
                                             cluster, job_id_, {"--log-level", "error", "--pre-vote=true"}),
                      dir_ + "/etcd" + std::to_string(h) + ".log", false);
}

int EmulatedHosts::etcd_leader() {
  if (options_.store != "etcd") throw std::logic_error("EmulatedHosts: the store is not etcd");
  std::vector<std::string> live;
  for (int h = 0; h < options_.hosts; ++h)
    if (etcd_[h] > 0) live.push_back(net_->address(h) + ":" + std::to_string(kEtcdClientPort));
  std::string eps;
  for (const auto& e : live) eps += (eps.empty() ? "" : ",") + e;
  CommandResult r = run_command({"ip", "netns", "exec", net_->switch_ns(), "etcdctl", "--endpoints=" + eps,
                                 "--dial-timeout=2s", "--command-timeout=3s", "endpoint", "status", "-w", "json"});
  try {
    auto js = nlohmann::json::parse(r.output.substr(r.output.find('[')));
    for (const auto& e : js) {
      const auto& st = e.at("Status");
      if (st.at("header").at("member_id") == st.at("leader")) {
        std::string ep = e.at("Endpoint").get<std::string>();
        for (int h = 0; h < options_.hosts; ++h)
          if (ep == net_->address(h) + ":" + std::to_string(kEtcdClientPort)) return h;
      }
    }
  } catch (const std::exception&) {
  }
  return -1;
}

double EmulatedHosts::kill_etcd(int h) {
  if (etcd_.at(h) > 0) {
    ::kill(etcd_[h], SIGKILL);
    waitpid(etcd_[h], nullptr, 0);
    etcd_[h] = -1;
  }
  return now_ms();
}

}  // namespace edl::testing
