// etcd backend beyond the conformance suite: failover when the member a client talks to is killed
// (leader and follower), exactly-once add/compare_set across lost answers (a lossy proxy in front of
// one member), lease TTL rounding and expiry across a leader change, and the deadline error.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <catch2/catch.hpp>
#include <mutex>
#include <sstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "edl/error.h"
#include "edl/store.h"
#include "testing/etcd_cluster.h"
#include "testing/require_dep.h"

using namespace std::chrono_literals;
using edl::testing::EtcdCluster;

namespace {

// A listening socket on a free 127.0.0.1 port.
int listen_loopback(int* port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  socklen_t len = sizeof(sa);
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  *port = ntohs(sa.sin_port);
  listen(fd, 16);
  return fd;
}

// A TCP proxy in front of one etcd member that can lose the next txn: either the request (never
// forwarded) or the answer (the request is applied, then the connection is closed instead of answering).
class LossyProxy {
 public:
  enum Mode { kLoseRequest, kLoseAnswer };

  explicit LossyProxy(int upstream_port) : upstream_port_(upstream_port) {
    listen_fd_ = listen_loopback(&port_);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~LossyProxy() {
    stop_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    acceptor_.join();
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& t : conns_) t.join();
    close(listen_fd_);
  }
  int port() const { return port_; }
  void lose_next_txn(Mode mode) {
    mode_ = mode;
    armed_ = true;
  }
  int lost() const { return lost_; }

 private:
  void accept_loop() {
    for (;;) {
      int c = accept(listen_fd_, nullptr, nullptr);
      if (c < 0) return;
      std::lock_guard<std::mutex> lock(mu_);
      conns_.emplace_back([this, c] { pump(c); });
    }
  }
  void pump(int client) {
    int up = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons(static_cast<uint16_t>(upstream_port_));
    if (connect(up, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
      close(up);
      close(client);
      return;
    }
    bool lose_answer = false;
    char buf[65536];
    while (!stop_) {
      pollfd fds[2] = {{client, POLLIN, 0}, {up, POLLIN, 0}};
      if (poll(fds, 2, 100) <= 0) continue;
      if (fds[0].revents) {
        ssize_t n = read(client, buf, sizeof(buf));
        if (n <= 0) break;
        if (std::string(buf, static_cast<size_t>(n)).rfind("POST /v3/kv/txn", 0) == 0 && armed_.exchange(false)) {
          ++lost_;
          if (mode_ == kLoseRequest) break;  // never forwarded
          lose_answer = true;
        }
        if (write(up, buf, static_cast<size_t>(n)) != n) break;
      }
      if (fds[1].revents) {
        ssize_t n = read(up, buf, sizeof(buf));
        if (n <= 0 || lose_answer) break;  // applied upstream, answer dropped
        if (write(client, buf, static_cast<size_t>(n)) != n) break;
      }
    }
    close(up);
    close(client);
  }

  int upstream_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false}, armed_{false};
  std::atomic<Mode> mode_{kLoseAnswer};
  std::atomic<int> lost_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> conns_;
};

bool has_etcd(const EtcdCluster& c) {
  return edl::testing::require_dep("etcd", c.available(), "Debian package etcd-server");
}

edl::StoreOptions opts(std::chrono::milliseconds request_timeout) {
  edl::StoreOptions o;
  o.connect_timeout = request_timeout;
  o.request_timeout = request_timeout;
  o.reconnect_timeout = request_timeout;  // the retry window (EDL_STORE_TIMEOUT_MS)
  return o;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const edl::StoreError& e) {
    return e.what();
  }
  return "(no StoreError)";
}

// Kills the member a client talks to (it is listed first) while the client has a watch open on it.
void failover(bool kill_leader) {
  EtcdCluster c(3);
  if (!has_etcd(c)) return;
  int victim = kill_leader ? c.leader() : c.follower();
  auto s = edl::connect_store(c.url(victim), opts(20s));
  s->set("k", "v0");
  CHECK(s->add("n", 1) == 1);
  std::optional<std::string> seen;
  std::thread waiter([&] { seen = s->wait_change("k", std::string("v0"), 60s); });
  std::this_thread::sleep_for(200ms);  // usually lets the watch open on the victim (either way is correct)
  c.kill(victim);
  CHECK(s->get("k") == std::optional<std::string>("v0"));
  CHECK(s->add("n", 1) == 2);
  CHECK(s->compare_set("g", std::nullopt, "1"));
  CHECK(s->keys("") == std::vector<std::string>{"g", "k", "n"});
  s->set("k", "v1");
  waiter.join();
  CHECK(seen == std::optional<std::string>("v1"));
  // A new client whose first member is the dead one connects to a live member.
  auto s2 = edl::connect_store(c.url(victim), opts(20s));
  CHECK(s2->get("n") == std::optional<std::string>("2"));
  // The member rejoins on its data dir and serves the data written while it was away.
  c.restart(victim);
  auto only = edl::connect_store("etcd://127.0.0.1:" + std::to_string(c.client_port(victim)), opts(20s));
  CHECK(only->get("k") == std::optional<std::string>("v1"));
}

}  // namespace

TEST_CASE("etcd store: URL forms", "[store][etcd]") {
  CHECK_THROWS_AS(edl::connect_store("etcd://"), edl::InvalidArgument);
  CHECK_THROWS_AS(edl::connect_store("etcd://127.0.0.1:2379,"), edl::InvalidArgument);
  CHECK_THROWS_AS(edl::connect_store("etcd://127.0.0.1:2379,nohost"), edl::InvalidArgument);
  CHECK_THROWS_AS(edl::connect_store("etcd://127.0.0.1:99999"), edl::InvalidArgument);
}

TEST_CASE("etcd store: the leader a client talks to is killed", "[store][etcd]") { failover(true); }

TEST_CASE("etcd store: the follower a client talks to is killed", "[store][etcd]") { failover(false); }

TEST_CASE("etcd store: add and compare_set are applied exactly once across a lost request or answer",
          "[store][etcd]") {
  EtcdCluster& c = EtcdCluster::shared();
  if (!has_etcd(c)) return;
  c.clear();
  LossyProxy proxy(c.client_port(0));
  // The proxy is listed first: the client's first attempt goes through it, the retry to member 1.
  std::string url = "etcd://127.0.0.1:" + std::to_string(proxy.port()) + ",127.0.0.1:" +
                    std::to_string(c.client_port(1)) + ",127.0.0.1:" + std::to_string(c.client_port(2));
  auto observer = edl::connect_store(c.url(2));
  for (auto mode : {LossyProxy::kLoseAnswer, LossyProxy::kLoseRequest}) {
    INFO((mode == LossyProxy::kLoseAnswer ? "answer lost" : "request lost"));
    std::string n = mode == LossyProxy::kLoseAnswer ? "n-answer" : "n-request";
    std::string g = mode == LossyProxy::kLoseAnswer ? "g-answer" : "g-request";
    int lost_before = proxy.lost();
    observer->set(n, "10");
    {
      auto s = edl::connect_store(url, opts(20s));
      proxy.lose_next_txn(mode);
      CHECK(s->add(n, 5) == 15);
    }
    CHECK(observer->get(n) == std::optional<std::string>("15"));  // not 20, not 10
    {
      // add(1) draws a ticket (the first one of the key starts its epoch by a compare-and-swap):
      // the ticket's txn is the one lost; a lost answer is recovered from the marker.
      auto s = edl::connect_store(url, opts(20s));
      CHECK(s->add(n, 1) == 16);
      proxy.lose_next_txn(mode);
      CHECK(s->add(n, 1) == 17);
    }
    {
      auto s = edl::connect_store(url, opts(20s));  // a lost txn moved the last client off the proxy
      proxy.lose_next_txn(mode);                    // the first add of a key creates it in the ticket's txn
      CHECK(s->add(n + "-fresh", 1) == 1);
    }
    CHECK(observer->get(n) == std::optional<std::string>("17"));
    CHECK(observer->get(n + "-fresh") == std::optional<std::string>("1"));
    {
      auto s = edl::connect_store(url, opts(20s));
      proxy.lose_next_txn(mode);
      std::optional<std::string> cur;
      CHECK(s->compare_set(g, std::nullopt, "1", &cur));  // a blind retry would see "1" and say false
      CHECK(cur == std::optional<std::string>("1"));
    }
    CHECK(observer->get(g) == std::optional<std::string>("1"));
    CHECK(proxy.lost() == lost_before + 4);  // every call really lost one txn
  }
  // The request markers are not visible to keys().
  CHECK(observer->keys("") == std::vector<std::string>{"g-answer", "g-request", "n-answer", "n-answer-fresh",
                                                      "n-request", "n-request-fresh"});
}

TEST_CASE("etcd store: lease TTLs round up to whole seconds and expire across a leader change", "[store][etcd]") {
  EtcdCluster c(3);
  if (!has_etcd(c)) return;
  auto s = edl::connect_store(c.url(c.leader()), opts(20s));
  // The lease etcd holds for a key: its granted TTL in seconds.
  auto granted_ttl = [&](const std::string& key) -> int64_t {
    httplib::Client h("127.0.0.1", c.client_port(c.follower()));
    std::string k64 = key == "w300" ? "dzMwMA==" : "dzE1MDA=";
    auto r = h.Post("/v3/kv/range", nlohmann::json{{"key", k64}}.dump(), "application/json");
    REQUIRE(r);
    auto kv = nlohmann::json::parse(r->body)["kvs"][0];
    REQUIRE(kv.contains("lease"));
    auto t = h.Post("/v3/lease/timetolive", nlohmann::json{{"ID", kv["lease"]}}.dump(), "application/json");
    REQUIRE(t);
    return std::stoll(nlohmann::json::parse(t->body).value("grantedTTL", std::string("0")));
  };
  s->set_lease("w300", "a", 300ms);
  s->set_lease("w1500", "b", 1500ms);
  CHECK(granted_ttl("w300") >= 1);
  CHECK(granted_ttl("w1500") >= 2);
  // Refreshes across a leader kill keep the key; then it expires and a waiter sees the deletion.
  c.kill(c.leader());
  for (int i = 0; i < 5; ++i) {
    s->set_lease("w1500", "b" + std::to_string(i), 1500ms);
    std::this_thread::sleep_for(200ms);
  }
  CHECK(s->get("w1500") == std::optional<std::string>("b4"));
  CHECK_FALSE(s->wait_change("w1500", std::string("b4"), 60s).has_value());
  CHECK_FALSE(s->get("w1500").has_value());
  // w300, never refreshed, expires too, but not necessarily first: the new leader restarts every
  // lease with its full TTL plus an election timeout (etcd's lessor Promote), so a lease of the old
  // term can outlive keys refreshed since (2 runs in 6 saw w300 still there when w1500 was gone).
  CHECK_FALSE(s->wait_change("w300", std::string("a"), 60s).has_value());
  CHECK(s->keys("w") == std::vector<std::string>{});
}

TEST_CASE("etcd store: a cluster that stays away past the deadline is a StoreError naming it", "[store][etcd]") {
  EtcdCluster c(1);
  if (!has_etcd(c)) return;
  std::string url = c.url();
  auto s = edl::connect_store(url, opts(1500ms));
  s->set("a", "1");
  c.kill(0);
  for (auto op : std::vector<std::function<void()>>{
           [&] { s->get("a"); }, [&] { s->set("a", "2"); }, [&] { s->add("n", 1); },
           [&] { s->compare_set("a", std::string("1"), "2"); }, [&] { s->set_lease("l", "x", 1s); },
           [&] { s->wait({"b"}, 10s); }}) {
    std::string e = error_of(op);
    CHECK(e.find(url) != std::string::npos);
    CHECK(e.find("no etcd member answered") != std::string::npos);
    CHECK(e.find("EDL_STORE_TIMEOUT_MS") != std::string::npos);
  }
  std::string e = error_of([&] { edl::connect_store(url, opts(1s)); });
  CHECK(e.find(url) != std::string::npos);
  CHECK(e.find("cannot connect") != std::string::npos);
}

TEST_CASE("etcd store: concurrent adds stay exact while leaders are killed and restarted in turn", "[store][etcd]") {
  EtcdCluster c(3);
  if (!has_etcd(c)) return;
  constexpr int kThreads = 3, kAdds = 100;
  std::atomic<int> done{0}, errors{0}, progress{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      try {
        auto s = edl::connect_store(c.url(t), opts(30s));  // each client starts on another member
        for (int i = 0; i < kAdds; ++i) {
          s->add("counter", 1);
          ++progress;
        }
      } catch (const std::exception&) {
        ++errors;
      }
      ++done;
    });
  }
  // Kill the leader, bring it back, three times, while the adds run (answers get lost mid-request):
  // the first kill after 10% of the adds, so it certainly lands in the middle of them.
  std::vector<int> at_kill;
  for (int round = 0; round < 3; ++round) {
    while (progress < (1 + 3 * round) * kThreads * kAdds / 10 && done < kThreads) std::this_thread::sleep_for(5ms);
    at_kill.push_back(progress);
    int l = c.leader();
    c.kill(l);
    std::this_thread::sleep_for(200ms);
    c.restart(l);
  }
  CHECK(at_kill[0] < kThreads * kAdds);
  for (auto& t : ts) t.join();
  CHECK(errors == 0);
  auto s = edl::connect_store(c.url(), opts(30s));
  CHECK(s->get("counter") == std::optional<std::string>(std::to_string(kThreads * kAdds)));
}

TEST_CASE("etcd store: etcd://USER@... authenticates with the job secret, tokens are renewed", "[store][etcd]") {
  EtcdCluster c(1, {"--auth-token-ttl", "1"});  // simple tokens expire after 1 s unused
  if (!has_etcd(c)) return;
  c.enable_auth("edl", "job-pw");
  std::string hosts = "127.0.0.1:" + std::to_string(c.client_port(0));
  edl::StoreOptions o = opts(20s);
  o.secret = "job-pw";
  auto s = edl::connect_store("etcd://edl@" + hosts, o);
  s->set("k", "v");
  CHECK(s->add("n", 2) == 2);
  CHECK(s->compare_set("g", std::nullopt, "1"));
  s->set_lease("l", "x", 2s);
  CHECK(s->keys("") == std::vector<std::string>{"g", "k", "l", "n"});
  std::thread writer([&] {
    std::this_thread::sleep_for(100ms);
    auto w = edl::connect_store("etcd://edl@" + hosts, o);
    w->set("k", "v2");
  });
  CHECK(s->wait_change("k", std::string("v"), 30s) == std::optional<std::string>("v2"));  // a watch with the token
  writer.join();
  std::this_thread::sleep_for(2500ms);  // the token expires: the next calls authenticate again
  CHECK(s->get("k") == std::optional<std::string>("v2"));
  CHECK(s->add("n", 1) == 3);
  CHECK(s->wait({"k"}, 1s));
  // Wrong secret, no secret, no user.
  edl::StoreOptions bad = opts(5s);
  bad.secret = "wrong";
  CHECK_THROWS_AS(edl::connect_store("etcd://edl@" + hosts, bad), edl::AuthError);
  CHECK_THROWS_AS(edl::connect_store("etcd://edl@" + hosts, opts(5s)), edl::InvalidArgument);
  auto anonymous = edl::connect_store("etcd://" + hosts, o);  // the status call needs no user
  CHECK_THROWS_AS(anonymous->get("k"), edl::AuthError);
  CHECK_THROWS_AS(edl::connect_store("etcd://@" + hosts, o), edl::InvalidArgument);
}

TEST_CASE("etcd store: leases revoked behind the client's back are granted again", "[store][etcd]") {
  EtcdCluster& c = EtcdCluster::shared();
  if (!has_etcd(c)) return;
  c.clear();
  httplib::Client h("127.0.0.1", c.client_port(1));
  auto lease_of = [&](const nlohmann::json& range) -> std::string {
    auto r = h.Post("/v3/kv/range", range.dump(), "application/json");
    REQUIRE(r);
    auto j = nlohmann::json::parse(r->body);
    REQUIRE(j.contains("kvs"));
    return j["kvs"][0].value("lease", std::string());
  };
  auto revoke = [&](const std::string& id) {
    REQUIRE_FALSE(id.empty());
    auto r = h.Post("/v3/lease/revoke", nlohmann::json{{"ID", id}}.dump(), "application/json");
    REQUIRE(r);
    REQUIRE(r->status == 200);
  };
  auto s = edl::connect_store(c.url(0), opts(20s));
  // The request-marker lease: its loss makes the next txn fail with "requested lease not found".
  CHECK(s->add("n", 1) == 1);
  revoke(lease_of({{"key", "X19lZGxfZXRjZC8="}, {"range_end", "X19lZGxfZXRjZDA="}}));  // __edl_etcd/ prefix
  CHECK(s->add("n", 1) == 2);
  CHECK(s->compare_set("n", std::string("2"), "3"));
  // A set_lease key whose lease was revoked (the key is gone with it) is created again on refresh.
  s->set_lease("w", "a", 5s);
  revoke(lease_of({{"key", "dw=="}}));
  CHECK_FALSE(s->get("w").has_value());
  s->set_lease("w", "b", 5s);
  CHECK(s->get("w") == std::optional<std::string>("b"));
}

namespace {

// Messages of one gRPC method the whole cluster received so far.
double served(const EtcdCluster& c, const std::string& method) { return c.received(method); }

}  // namespace

TEST_CASE("etcd store: waits on one key share one watch stream and never return an older value", "[store][etcd]") {
  EtcdCluster& c = EtcdCluster::shared();
  if (!has_etcd(c)) return;
  c.clear();
  auto s = edl::connect_store(c.url(0), opts(20s));
  auto other = edl::connect_store(c.url(1), opts(20s));
  s->set("ev", "0");
  CHECK(s->wait_change("ev", std::string("0"), 100ms) == std::optional<std::string>("0"));  // opens the stream
  // Twenty slices of waiting (as a worker's watch thread, once per heartbeat): no read and no new
  // stream, but for at most one renewal of the stream (every 5 s).
  const double ranges = served(c, "Range"), watches = served(c, "Watch");
  for (int i = 0; i < 20; ++i) CHECK(s->wait_change("ev", std::string("0"), 50ms) == std::optional<std::string>("0"));
  CHECK(served(c, "Range") - ranges <= 1);
  CHECK(served(c, "Watch") - watches <= 1);
  // A change by another client ends a wait with the new value.
  std::thread setter([&] {
    std::this_thread::sleep_for(100ms);
    other->set("ev", "1");
  });
  const double ranges_before_change = served(c, "Range");
  CHECK(s->wait_change("ev", std::string("0"), 20s) == std::optional<std::string>("1"));
  setter.join();
  // ... taken from the stream's event with no confirming read: the event is newer than anything this
  // client read or wrote of the key (a survivor of a failure no longer reads the event key once more).
  CHECK(served(c, "Range") - ranges_before_change == 0);
  // A value this client wrote itself, newer than the stream's last event: the wait never returns the
  // older value the stream may still hold (the stream is behind our write: a read confirms).
  for (int i = 100; i < 130; ++i) {
    s->set("ev", std::to_string(i));
    CHECK(s->wait_change("ev", std::to_string(i), 5ms) == std::optional<std::string>(std::to_string(i)));
  }
  s->add("ev", 1);  // 130, by a ticket: the counter's publication may be another client's write
  CHECK(s->wait_change("ev", std::string("130"), 5ms) == std::optional<std::string>("130"));
  // A value the caller read itself, newer than the stream's last event: the wait goes on with it and
  // never returns the older value the stream still held.
  for (int i = 2; i < 30; ++i) {
    other->set("ev", std::to_string(i));
    auto now = s->get("ev");
    REQUIRE(now == std::optional<std::string>(std::to_string(i)));
    CHECK(s->wait_change("ev", now, 20ms) == now);
  }
  other->del("ev");
  CHECK_FALSE(s->wait_change("ev", std::string("29"), 20s).has_value());
  // Waiters of one key in many threads, one stream: each sees the change.
  std::vector<std::thread> waiters;
  std::atomic<int> woken{0};
  for (int i = 0; i < 8; ++i)
    waiters.emplace_back([&] {
      if (s->wait_change("ev", std::nullopt, 20s) == std::optional<std::string>("x")) ++woken;
    });
  std::this_thread::sleep_for(200ms);
  other->set("ev", "x");
  for (auto& t : waiters) t.join();
  CHECK(woken == 8);
}

TEST_CASE("etcd store: a worker's lease refreshed every 100 ms is kept alive every 5 s, 11 s of life after each refresh",
          "[store][etcd]") {
  EtcdCluster& c = EtcdCluster::shared();
  if (!has_etcd(c)) return;
  c.clear();
  auto s = edl::connect_store(c.url(0), opts(20s));
  s->set_lease("beat", "0", 3s);  // the grant
  const double keepalives = served(c, "LeaseKeepAlive");
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 1; i <= 60; ++i) {
    std::this_thread::sleep_for(100ms);
    s->set_lease("beat", std::to_string(i), 3s);
    CHECK(s->get("beat") == std::optional<std::string>(std::to_string(i)));
  }
  const double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double sent = served(c, "LeaseKeepAlive") - keepalives;
  CHECK(sent >= 1);  // 6 s or more of refreshes
  CHECK(sent <= elapsed_s / 5);
  // A lease of 3 s is granted its TTL + max(TTL, 10 s) - half the TTL + the 5 s between keepalives:
  // a refresh 5 s after the last keepalive still leaves 11 s.
  httplib::Client h("127.0.0.1", c.client_port(1));
  auto r = h.Post("/v3/kv/range", nlohmann::json{{"key", "YmVhdA=="}}.dump(), "application/json");  // "beat"
  REQUIRE(r);
  auto kv = nlohmann::json::parse(r->body)["kvs"][0];
  auto t = h.Post("/v3/lease/timetolive", nlohmann::json{{"ID", kv["lease"]}}.dump(), "application/json");
  REQUIRE(t);
  CHECK(std::stoll(nlohmann::json::parse(t->body).value("grantedTTL", std::string("0"))) == 16);
  s->del("beat");
}

namespace {

// n clients, spread over the cluster's members.
std::vector<std::shared_ptr<edl::Store>> clients_of(const EtcdCluster& c, int n) {
  std::vector<std::shared_ptr<edl::Store>> clients;
  for (int t = 0; t < n; ++t) clients.push_back(edl::connect_store(c.url(t % c.size()), opts(20s)));
  return clients;
}

}  // namespace

// Adds of a delta other than 1 are a compare-and-swap loop (adds of 1 draw tickets: below).
TEST_CASE("etcd store: concurrent adds to one counter are exact and back off after a lost race", "[store][etcd]") {
  EtcdCluster& c = EtcdCluster::shared();
  if (!has_etcd(c)) return;
  c.clear();
  constexpr int kThreads = 16, kAdds = 20;
  const auto clients = clients_of(c, kThreads);
  clients[0]->set("hot", "100");
  const double txns = served(c, "Txn");
  std::vector<std::vector<int64_t>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kAdds; ++i) got[t].push_back(clients[t]->add("hot", 2));
    });
  for (auto& t : threads) t.join();
  std::vector<int64_t> all;
  for (const auto& g : got) all.insert(all.end(), g.begin(), g.end());
  std::sort(all.begin(), all.end());
  std::vector<int64_t> want(kThreads * kAdds);
  for (size_t i = 0; i < want.size(); ++i) want[i] = 102 + 2 * static_cast<int64_t>(i);
  CHECK(all == want);  // every add applied once, each saw its own value
  CHECK(clients[0]->get("hot") == std::optional<std::string>(std::to_string(100 + 2 * kThreads * kAdds)));
  // The losers of a race retry after a random delay (not all at once). Losers that all retry at
  // once send about kThreads / 2 txns per add; on a loaded machine (the scheduler, not the delays,
  // then decides who runs when) the spread is smaller, so the bound is the one no CAS loop may pass:
  // fewer txns per add than there are rivals.
  CHECK(served(c, "Txn") - txns < 1.0 * kThreads * kThreads * kAdds);
  // Non-canonical integers (written by set) add too.
  clients[0]->set("odd", "07");
  CHECK(clients[1]->add("odd", 2) == 9);
  CHECK_THROWS_AS(clients[0]->add("hot", INT64_MAX), edl::InvalidArgument);
}

// add(key, 1) draws a ticket (a put on a hidden key that never loses a race) and then publishes it:
// a burst of adds costs etcd O(1) txns each, not one lost compare-and-swap per rival. Writes of any
// other kind end the ticket epoch, and every add stays linearizable with them.
TEST_CASE("etcd store: adds of 1 draw tickets: exact, O(1) txns each, linearizable with set and other deltas",
          "[store][etcd]") {
  EtcdCluster& c = EtcdCluster::shared();
  if (!has_etcd(c)) return;
  c.clear();
  constexpr int kThreads = 32, kAdds = 8;
  const auto clients = clients_of(c, kThreads);
  auto burst = [&](const std::string& key, const std::function<void()>& meanwhile) {
    std::vector<std::vector<int64_t>> got(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        for (int i = 0; i < kAdds; ++i) got[t].push_back(clients[t]->add(key, 1));
      });
    meanwhile();
    for (auto& t : threads) t.join();
    std::vector<int64_t> all;
    for (const auto& g : got) all.insert(all.end(), g.begin(), g.end());
    std::sort(all.begin(), all.end());
    return all;
  };
  SECTION("a burst of adds") {
    clients[0]->set("hot", "100");
    const double txns = served(c, "Txn");
    auto all = burst("hot", [] {});
    std::vector<int64_t> want(kThreads * kAdds);
    for (size_t i = 0; i < want.size(); ++i) want[i] = 101 + static_cast<int64_t>(i);
    CHECK(all == want);  // each add applied once and saw its own value
    CHECK(clients[5]->get("hot") == std::optional<std::string>(std::to_string(100 + kThreads * kAdds)));
    // A CAS loop costs about kThreads / 2 txns per add in such a burst; tickets cost 2 (the draw and
    // one publication, whatever the other adders did), plus the first add's CAS.
    CHECK(served(c, "Txn") - txns < 3.0 * kThreads * kAdds);
  }
  SECTION("adds of other deltas meanwhile") {
    auto all = burst("mixed", [&] {
      for (int i = 0; i < 10; ++i) clients[0]->add("mixed", 1000);
    });
    CHECK(clients[1]->get("mixed") == std::optional<std::string>(std::to_string(10000 + kThreads * kAdds)));
    CHECK(std::adjacent_find(all.begin(), all.end()) == all.end());  // no value returned twice
  }
  SECTION("a set meanwhile") {
    constexpr int64_t kReset = 1000000;
    auto all = burst("reset", [&] {
      std::this_thread::sleep_for(20ms);
      clients[0]->set("reset", std::to_string(kReset));
    });
    // Adds before the set returned 1..m, adds after it kReset+1..kReset+k: each exactly once.
    std::vector<int64_t> want;
    const auto after = std::count_if(all.begin(), all.end(), [](int64_t v) { return v > kReset; });
    for (int64_t i = 1; i <= static_cast<int64_t>(all.size()) - after; ++i) want.push_back(i);
    for (int64_t i = 1; i <= after; ++i) want.push_back(kReset + i);
    CHECK(all == want);
    CHECK(clients[2]->get("reset") == std::optional<std::string>(std::to_string(kReset + after)));
    clients[3]->del("reset");
    CHECK(clients[4]->add("reset", 1) == 1);
    CHECK(clients[4]->compare_set("reset", std::string("1"), "7"));
    CHECK(clients[5]->add("reset", 1) == 8);
  }
  for (const auto& k : clients[0]->keys("")) CHECK(k.rfind("__edl_etcd/", 0) != 0);  // tickets are hidden
}

// get_many sends one read-only txn per 128 keys (etcd's --max-txn-ops default), not a read per key;
// a wait on one missing key, called slice after slice (the mesh bootstrap's dial loop), rides on the
// key's shared watch stream instead of opening a stream per call.
TEST_CASE("etcd store: get_many is one txn per 128 keys, waits on one key share its watch stream", "[store][etcd]") {
  EtcdCluster& c = EtcdCluster::shared();
  if (!has_etcd(c)) return;
  c.clear();
  auto s = edl::connect_store(c.url(0), opts(20s));
  std::vector<std::string> keys;
  for (int i = 0; i < 200; ++i) {
    keys.push_back("many/" + std::to_string(i));
    if (i % 7 != 3) s->set(keys.back(), "v" + std::to_string(i));
  }
  const double txns = served(c, "Txn"), ranges = served(c, "Range");
  const auto got = s->get_many(keys);
  CHECK(served(c, "Txn") - txns == 2);
  CHECK(served(c, "Range") - ranges == 0);
  REQUIRE(got.size() == keys.size());
  for (int i = 0; i < 200; ++i)
    CHECK(got[i] == (i % 7 == 3 ? std::nullopt : std::optional<std::string>("v" + std::to_string(i))));
  CHECK(s->get_many({}).empty());

  const double watches = served(c, "Watch");
  for (int i = 0; i < 10; ++i) CHECK_FALSE(s->wait({"late"}, 20ms));
  CHECK(served(c, "Watch") - watches <= 1);
  std::thread setter([&] {
    std::this_thread::sleep_for(100ms);
    edl::connect_store(c.url(1), opts(20s))->set("late", "x");
  });
  CHECK(s->wait({"late"}, 20s));
  setter.join();
  CHECK(s->wait({"late", "many/0"}, 1s));
  CHECK_FALSE(s->wait({"late", "many/3"}, 50ms));
}

namespace {

// A member that answers the connect's status call (forwarded to a real member) and then takes every
// request without ever answering it: a cluster too busy to answer within an attempt's limit.
class SilentMember {
 public:
  explicit SilentMember(int upstream_port) : upstream_port_(upstream_port) {
    fd_ = listen_loopback(&port_);
    acceptor_ = std::thread([this] {
      for (int c; (c = accept(fd_, nullptr, nullptr)) >= 0;) {
        std::lock_guard<std::mutex> lock(mu_);
        held_.push_back(c);
        conns_.emplace_back([this, c] { serve(c); });
      }
    });
  }
  ~SilentMember() {
    ::shutdown(fd_, SHUT_RDWR);
    acceptor_.join();
    std::lock_guard<std::mutex> lock(mu_);
    for (int c : held_) ::shutdown(c, SHUT_RDWR);
    for (auto& t : conns_) t.join();
    for (int c : held_) close(c);
    close(fd_);
  }
  int port() const { return port_; }
  int unanswered() const { return unanswered_; }

 private:
  void serve(int c) {
    char buf[65536];
    for (ssize_t n; (n = read(c, buf, sizeof(buf))) > 0;) {
      std::string req(buf, static_cast<size_t>(n));
      if (req.rfind("POST /v3/maintenance/status", 0) != 0) {
        ++unanswered_;
        continue;  // never answered
      }
      httplib::Client up("127.0.0.1", upstream_port_);
      auto r = up.Post("/v3/maintenance/status", "{}", "application/json");
      if (!r) return;
      std::string answer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                           std::to_string(r->body.size()) + "\r\n\r\n" + r->body;
      if (write(c, answer.data(), answer.size()) != static_cast<ssize_t>(answer.size())) return;
    }
  }

  int upstream_port_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<int> unanswered_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<int> held_;
  std::vector<std::thread> conns_;
};

}  // namespace

// When every member lets an attempt time out, the client waits longer for the next answer (the
// attempt limit doubles, up to 8 times) instead of sending the request again every attempt limit:
// an overloaded cluster still works on the requests it has, and resending them only deepens its queue.
TEST_CASE("etcd store: attempts that all time out make the client wait longer, not resend sooner", "[store][etcd]") {
  EtcdCluster& c = EtcdCluster::shared();
  if (!has_etcd(c)) return;
  SilentMember silent(c.client_port(0));
  edl::StoreOptions o = opts(4s);  // one attempt: request_timeout / 4 = 1 s
  o.reconnect_timeout = 7s;
  auto s = edl::connect_store("etcd://127.0.0.1:" + std::to_string(silent.port()), o);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(s->get("k"), edl::StoreError);
  CHECK(std::chrono::steady_clock::now() - t0 >= 6s);
  // Attempts of 1, 2 and 4 s (the last cut by the 7 s window): 3 requests. With a fixed 1 s limit
  // (and the 50, 100, 200, ... ms backoff between rounds) it would have been 6.
  CHECK(silent.unanswered() >= 2);
  CHECK(silent.unanswered() <= 4);
}

// get_many_watched (what a worker reads its watched peers' leases with, every heartbeat): the first
// read opens a watch stream per key and reads them; later reads cost etcd no request and still see
// every change (a put, a delete, a lease that expires), never a value older than one a get_many read.
TEST_CASE("etcd store: get_many_watched reads from watch streams: no request per read, changes and expiry seen",
          "[store][etcd]") {
  EtcdCluster& c = EtcdCluster::shared();
  if (!has_etcd(c)) return;
  c.clear();
  auto s = edl::connect_store(c.url(0), opts(20s));
  auto other = edl::connect_store(c.url(1), opts(20s));
  other->set("watched/a", "1");
  other->set_lease("watched/b", "beat 1", 1000ms);
  const std::vector<std::string> keys = {"watched/a", "watched/b", "watched/none"};
  auto expect = [&](const std::vector<std::optional<std::string>>& want) {
    for (auto deadline = std::chrono::steady_clock::now() + 15s;;) {
      auto got = s->get_many_watched(keys);
      if (got == want || std::chrono::steady_clock::now() > deadline) return got == want;
      std::this_thread::sleep_for(10ms);
    }
  };
  CHECK(expect({"1", "beat 1", std::nullopt}));
  auto requests = [&] { return served(c, "Txn") + served(c, "Range") + served(c, "Watch"); };
  // Until the streams are in sync (opened and read: a busy machine may take a while), a read of a key
  // without one costs a request.
  for (auto deadline = std::chrono::steady_clock::now() + 15s; std::chrono::steady_clock::now() < deadline;) {
    const double before = requests();
    s->get_many_watched(keys);
    if (requests() == before) break;
    std::this_thread::sleep_for(50ms);
  }
  const double before = requests();
  for (int i = 0; i < 50; ++i) CHECK(s->get_many_watched(keys) == std::vector<std::optional<std::string>>{"1", "beat 1", std::nullopt});
  CHECK(requests() - before == 0);

  other->set("watched/a", "2");
  other->set("watched/none", "now");
  CHECK(expect({"2", "beat 1", "now"}));
  // A read moves a lagging stream forward: nothing older than it is returned afterwards.
  other->set("watched/a", "3");
  CHECK(s->get_many({"watched/a", "watched/b"}) == std::vector<std::optional<std::string>>{"3", "beat 1"});
  CHECK(s->get_many_watched(keys)[0] == std::optional<std::string>("3"));
  // The lease (TTL 1 s, granted 2 s) expires: the stream sees the deletion.
  CHECK(expect({"3", std::nullopt, "now"}));
  other->del("watched/none");
  CHECK(expect({"3", std::nullopt, std::nullopt}));
}
