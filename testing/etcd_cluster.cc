#include "testing/etcd_cluster.h"

#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "testing/ports.h"
#include "testing/process.h"

namespace edl::testing {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// The etcd server binary (Debian etcd-server), "" when it is not installed.
const std::string& etcd_binary() {
  static const std::string path = find_program("etcd");
  return path;
}

// POST to one member; nullopt when it does not answer with JSON.
std::optional<nlohmann::json> post(int port, const std::string& path, const nlohmann::json& body) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(1s);
  c.set_read_timeout(2s);
  auto res = c.Post(path, body.dump(), "application/json");
  if (!res || res->status != 200) return std::nullopt;
  auto j = nlohmann::json::parse(res->body, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

}  // namespace

EtcdCluster::EtcdCluster(int members, std::vector<std::string> extra_args) : extra_args_(std::move(extra_args)) {
  if (etcd_binary().empty()) return;  // available() false: the test decides (testing/require_dep.h)
  std::string base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  std::string tmpl = base + "/edl-etcd-XXXXXX";
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed in " + base);
  dir_ = tmpl;
  // A port can be taken by another process between choosing it and etcd binding it: then the member
  // exits with "address already in use" and the cluster is started again on new ports.
  for (int attempt = 0;; ++attempt) {
    std::vector<int> ports = free_ports(2 * members);
    members_.clear();
    initial_cluster_.clear();
    for (int i = 0; i < members; ++i) {
      Member m;
      m.name = "m" + std::to_string(i);
      m.client_port = ports[2 * i];
      m.peer_port = ports[2 * i + 1];
      if (!initial_cluster_.empty()) initial_cluster_ += ",";
      initial_cluster_ += m.name + "=http://127.0.0.1:" + std::to_string(m.peer_port);
      members_.push_back(m);
    }
    try {
      for (int i = 0; i < members; ++i) spawn(i);
      wait_ready();
      return;
    } catch (const std::exception& e) {
      for (int i = 0; i < members; ++i) kill(i);
      bool port_taken = std::string(e.what()).find("address already in use") != std::string::npos;
      for (int i = 0; i < members; ++i) {
        std::error_code ec;
        std::filesystem::remove_all(dir_ + "/" + members_[i].name, ec);
        std::filesystem::remove(dir_ + "/" + members_[i].name + ".log", ec);
      }
      if (port_taken && attempt < 3) continue;
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
      members_.clear();
      throw;
    }
  }
}

EtcdCluster::~EtcdCluster() {
  for (int i = 0; i < size(); ++i) kill(i);
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

std::vector<std::string> etcd_member_command(const std::string& name, const std::string& data_dir,
                                             const std::string& client_url, const std::string& peer_url,
                                             const std::string& initial_cluster, const std::string& token,
                                             const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"etcd", "--name", name, "--data-dir", data_dir,
                                   "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
                                   "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                                   "--initial-cluster", initial_cluster, "--initial-cluster-state", "new",
                                   "--initial-cluster-token", token};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

void EtcdCluster::spawn(int i) {
  Member& m = members_[i];
  std::string client = "http://127.0.0.1:" + std::to_string(m.client_port);
  std::string peer = "http://127.0.0.1:" + std::to_string(m.peer_port);
  std::vector<std::string> extra = {"--logger", "zap", "--log-level", "warn"};
  extra.insert(extra.end(), extra_args_.begin(), extra_args_.end());
  std::vector<std::string> args = etcd_member_command(m.name, dir_ + "/" + m.name, client, peer, initial_cluster_,
                                                      "edl-test-" + std::to_string(getpid()) + dir_, extra);
  args[0] = etcd_binary();
  SpawnOptions o;
  o.log = dir_ + "/" + m.name + ".log";  // stdout and stderr, appended across restarts
  o.append = true;
  o.own_group = false;
  o.die_with_parent = true;
  m.pid = edl::testing::spawn(args, o);
}

std::string EtcdCluster::log_tail(int i) const {
  std::ifstream f(dir_ + "/" + members_[i].name + ".log");
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  return s.size() > 2000 ? s.substr(s.size() - 2000) : s;
}

// Throws naming member i, with the tail of its log, when its process exited.
void EtcdCluster::check_alive(int i) const {
  int status = 0;
  if (waitpid(members_[i].pid, &status, WNOHANG) == members_[i].pid)
    throw std::runtime_error("etcd member " + members_[i].name + " exited: " + log_tail(i));
}

// Every running member is up and knows the leader (a member that exited is an error).
void EtcdCluster::wait_ready() const {
  auto deadline = Clock::now() + 20s;
  while (Clock::now() < deadline) {
    bool all = true;
    for (int i = 0; i < size(); ++i) {
      if (members_[i].pid <= 0) continue;
      check_alive(i);
      auto st = post(members_[i].client_port, "/v3/maintenance/status", nlohmann::json::object());
      all = all && st && st->contains("leader");
    }
    if (all) return;
    std::this_thread::sleep_for(50ms);
  }
  throw std::runtime_error("etcd cluster in " + dir_ + " is not ready after 20 s");
}

int EtcdCluster::leader() const {
  auto deadline = Clock::now() + 20s;
  while (Clock::now() < deadline) {
    for (int i = 0; i < size(); ++i) {
      if (members_[i].pid <= 0) continue;
      check_alive(i);
      auto st = post(members_[i].client_port, "/v3/maintenance/status", nlohmann::json::object());
      if (!st || !st->contains("leader")) continue;
      std::string leader_id = (*st)["leader"].get<std::string>();
      // Which member has that id: ask each running one for its own id.
      for (int j = 0; j < size(); ++j) {
        if (members_[j].pid <= 0) continue;
        auto sj = post(members_[j].client_port, "/v3/maintenance/status", nlohmann::json::object());
        if (sj && (*sj)["header"].value("member_id", std::string()) == leader_id) return j;
      }
    }
    std::this_thread::sleep_for(50ms);
  }
  throw std::runtime_error("etcd cluster in " + dir_ + " has no leader after 20 s");
}

int EtcdCluster::follower() const {
  int l = leader();
  for (int i = 0; i < size(); ++i)
    if (i != l && members_[i].pid > 0) return i;
  throw std::runtime_error("etcd cluster has no running follower");
}

std::string EtcdCluster::url(int first) const {
  std::string u = "etcd://127.0.0.1:" + std::to_string(members_[first].client_port);
  for (int i = 0; i < size(); ++i)
    if (i != first) u += ",127.0.0.1:" + std::to_string(members_[i].client_port);
  return u;
}

std::string EtcdCluster::metrics(int i) const {
  httplib::Client c("127.0.0.1", members_[i].client_port);
  c.set_connection_timeout(1s);
  c.set_read_timeout(5s);
  auto res = c.Get("/metrics");
  return res && res->status == 200 ? res->body : "";
}

double EtcdCluster::received(const std::string& method) const {
  double n = 0;
  for (int i = 0; i < size(); ++i) {
    if (!running(i)) continue;
    std::istringstream m(metrics(i));
    for (std::string line; std::getline(m, line);)
      if (line.rfind("grpc_server_msg_received_total{", 0) == 0 &&
          line.find("grpc_method=\"" + method + "\"") != std::string::npos)
        n += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return n;
}

void EtcdCluster::kill(int i) {
  Member& m = members_[i];
  if (m.pid <= 0) return;
  ::kill(m.pid, SIGKILL);
  int status = 0;
  waitpid(m.pid, &status, 0);
  m.pid = -2;
}

void EtcdCluster::restart(int i) {
  if (members_[i].pid > 0) return;
  spawn(i);  // the data dir exists: etcd rejoins with it and ignores the --initial-* flags
  wait_ready();
}

void EtcdCluster::clear() {
  // key "\0" with range_end "\0": every key. Retries while a leader is being elected.
  nlohmann::json all = {{"key", "AA=="}, {"range_end", "AA=="}};
  auto deadline = Clock::now() + 20s;
  while (Clock::now() < deadline) {
    for (int i = 0; i < size(); ++i)
      if (members_[i].pid > 0 && post(members_[i].client_port, "/v3/kv/deleterange", all)) return;
    std::this_thread::sleep_for(50ms);
  }
  throw std::runtime_error("etcd cluster in " + dir_ + ": could not clear the keys");
}

void EtcdCluster::enable_auth(const std::string& user, const std::string& password) {
  using nlohmann::json;
  std::string root_pw = "root-" + std::to_string(getpid()) + "-" + std::to_string(Clock::now().time_since_epoch().count());
  const std::vector<std::pair<std::string, json>> steps = {
      {"role/add", {{"name", "root"}}},
      {"user/add", {{"name", "root"}, {"password", root_pw}}},
      {"user/grant", {{"user", "root"}, {"role", "root"}}},
      {"role/add", {{"name", "edl-rw"}}},
      // key "\0" .. range_end "\0": every key
      {"role/grant", {{"name", "edl-rw"}, {"perm", {{"permType", "READWRITE"}, {"key", "AA=="}, {"range_end", "AA=="}}}}},
      {"user/add", {{"name", user}, {"password", password}}},
      {"user/grant", {{"user", user}, {"role", "edl-rw"}}},
      {"enable", json::object()}};
  int port = members_[leader()].client_port;
  for (const auto& [path, body] : steps)
    if (!post(port, "/v3/auth/" + path, body)) throw std::runtime_error("etcd: /v3/auth/" + path + " failed");
}

EtcdCluster& EtcdCluster::shared() {
  static EtcdCluster cluster(3);
  return cluster;
}

EtcdCluster& EtcdCluster::shared_single() {
  static EtcdCluster cluster(1);
  return cluster;
}

}  // namespace edl::testing
