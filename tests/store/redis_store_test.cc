// Redis backend specifics (the shared conformance suite covers the Store semantics).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "store/loopback.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "edl/error.h"
#include "edl/store.h"
#include "testing/redis_server.h"
#include "testing/require_dep.h"

using namespace std::chrono_literals;

TEST_CASE("redis store: wrong or missing password gives AuthError", "[store][redis]") {
  auto& server = edl::testing::RedisServer::shared();
  if (!edl::testing::require_dep("redis-server", server.available(), "Debian package redis-server")) return;
  edl::StoreOptions o;
  o.secret = "not-the-password";
  CHECK_THROWS_AS(edl::connect_store(server.url(), o), edl::AuthError);
  o.secret = "";
  CHECK_THROWS_AS(edl::connect_store(server.url(), o), edl::AuthError);
}

TEST_CASE("redis store: server death fails waiters and calls with StoreError", "[store][redis]") {
  edl::testing::RedisServer server("pw");
  if (!edl::testing::require_dep("redis-server", server.available(), "Debian package redis-server")) return;
  edl::StoreOptions o;
  o.secret = "pw";
  o.request_timeout = 3000ms;
  o.reconnect_timeout = 300ms;  // gone for good: StoreError once the reconnect window has passed
  auto s = edl::connect_store(server.url(), o);
  s->set("a", "1");
  std::atomic<bool> threw{false};
  std::thread waiter([&] {
    try {
      s->wait({"never"}, 30s);
    } catch (const edl::StoreError&) {
      threw = true;
    }
  });
  std::this_thread::sleep_for(100ms);
  server.kill();
  waiter.join();
  CHECK(threw.load());
  CHECK_THROWS_AS(s->get("a"), edl::StoreError);
}

TEST_CASE("redis store: unreachable server gives StoreError naming the URL", "[store][redis]") {
  edl::StoreOptions o;
  o.connect_timeout = 300ms;
  try {
    edl::connect_store("redis://127.0.0.1:1", o);
    FAIL("connected to port 1");
  } catch (const edl::StoreError& e) {
    CHECK(std::string(e.what()).find("redis://127.0.0.1:1") != std::string::npos);
  }
}

namespace {

using Clock = std::chrono::steady_clock;

// A TCP proxy in front of redis-server that, for every `every`-th command containing `marker`
// (the add / compare_set scripts), closes both sides when the server's reply arrives instead of
// forwarding it: the script ran, the client never reads its reply. Byte-level: the command
// connection carries one request at a time, so the first bytes back are that request's reply.
class RedisDropProxy {
 public:
  RedisDropProxy(int upstream, std::string marker, int every) : upstream_(upstream), marker_(std::move(marker)), every_(every) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0);
    REQUIRE(listen(fd_, 16) == 0);
    socklen_t len = sizeof(sa);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&sa), &len);
    port_ = ntohs(sa.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~RedisDropProxy() {
    stop_ = true;
    shutdown(fd_, SHUT_RDWR);
    acceptor_.join();
    for (auto& t : pumps_) t.join();
    close(fd_);
  }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  int drops() const { return drops_.load(); }

 private:
  static int dial(int port) { return edl::test::connect_loopback(port); }
  void accept_loop() {
    for (;;) {
      int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0 || stop_) {
        if (c >= 0) close(c);
        return;
      }
      int u = dial(upstream_);
      if (u < 0) {
        close(c);
        continue;
      }
      pumps_.emplace_back([this, c, u] {
        pump(c, u);
        close(c);
        close(u);
      });
    }
  }
  void pump(int c, int u) {
    char buf[65536];
    bool armed = false;
    while (!stop_) {
      pollfd p[2] = {{c, POLLIN, 0}, {u, POLLIN, 0}};
      if (poll(p, 2, 100) <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t r = recv(p[i].fd, buf, sizeof(buf), 0);
        if (r <= 0) return;
        if (i == 0 && std::string(buf, r).find(marker_) != std::string::npos) {
          std::lock_guard<std::mutex> lock(mu_);
          armed = ++seen_ % every_ == 0;
        }
        if (i == 1 && armed) {
          ++drops_;
          return;
        }
        if (send(i == 0 ? u : c, buf, r, MSG_NOSIGNAL) != r) return;
      }
    }
  }
  int upstream_;
  std::string marker_;
  int every_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> drops_{0};
  std::mutex mu_;
  int seen_ = 0;
  std::thread acceptor_;
  std::vector<std::thread> pumps_;
};

edl::StoreOptions reconnecting(const std::string& secret, std::chrono::milliseconds window) {
  edl::StoreOptions o;
  o.secret = secret;
  o.request_timeout = 5000ms;
  o.reconnect_timeout = window;
  return o;
}

}  // namespace

TEST_CASE("redis store: kill -9 and restart with the append-only file: the job goes on", "[store][redis][reconnect]") {
  edl::testing::RedisServer server("pw", /*appendonly=*/true);
  if (!server.available()) {
    WARN("redis-server is not installed: skipping");
    return;
  }
  auto s = edl::connect_store(server.url(), reconnecting("pw", 20000ms));
  auto watcher = edl::connect_store(server.url(), reconnecting("pw", 20000ms));
  std::atomic<bool> woke{false};
  std::atomic<int> errors{0};
  std::thread waiter([&] {
    try {
      woke = watcher->wait({"after"}, 60s);  // blocked across the restart
    } catch (const std::exception&) {
      ++errors;
    }
  });
  std::atomic<bool> stop{false};
  std::atomic<int64_t> last{0};
  std::thread adder([&] {
    try {
      while (!stop) {
        int64_t v = s->add("counter", 1);
        if (v != last + 1) ++errors;  // exactly once: consecutive values, none skipped or repeated
        last = v;
      }
    } catch (const std::exception&) {
      ++errors;
    }
  });
  auto deadline = Clock::now() + 10s;
  while (last.load() < 50 && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
  server.restart();  // SIGKILL, then the same port and directory: the AOF is replayed
  int64_t at_restart = last.load();
  deadline = Clock::now() + 20s;
  while (last.load() < at_restart + 50 && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
  auto other = edl::connect_store(server.url(), reconnecting("pw", 5000ms));
  other->set("after", "1");
  waiter.join();
  stop = true;
  adder.join();
  CHECK(errors.load() == 0);
  CHECK(woke.load());
  CHECK(last.load() >= at_restart + 50);
  CHECK(other->get("counter") == std::optional<std::string>(std::to_string(last.load())));
}

TEST_CASE("redis store: add and compare_set across a dropped reply are applied exactly once", "[store][redis][reconnect]") {
  edl::testing::RedisServer server("pw");
  if (!server.available()) {
    WARN("redis-server is not installed: skipping");
    return;
  }
  RedisDropProxy proxy(server.port(), "__edl_req:", 3);
  auto s = edl::connect_store(proxy.url(), reconnecting("pw", 10000ms));
  auto direct = edl::connect_store(server.url(), reconnecting("pw", 10000ms));
  for (int i = 1; i <= 30; ++i) CHECK(s->add("counter", 1) == i);
  CHECK(direct->get("counter") == std::optional<std::string>("30"));
  std::optional<std::string> cur;
  for (int i = 1; i <= 9; ++i) {
    std::optional<std::string> now;
    REQUIRE(s->compare_set("gen", cur, std::to_string(i), &now));  // a re-applied success would fail
    cur = std::to_string(i);
    CHECK(now == cur);
  }
  CHECK(direct->get("gen") == std::optional<std::string>("9"));
  CHECK(proxy.drops() >= 13);
  CHECK(direct->keys("") == std::vector<std::string>{"counter", "gen"});  // replay records stay internal
}

TEST_CASE("redis store: a server gone past the deadline gives StoreError naming the URL", "[store][redis][reconnect]") {
  edl::testing::RedisServer server("pw");
  if (!server.available()) {
    WARN("redis-server is not installed: skipping");
    return;
  }
  auto s = edl::connect_store(server.url(), reconnecting("pw", 1000ms));
  s->set("a", "1");
  server.kill();
  auto t0 = Clock::now();
  try {
    s->get("a");
    FAIL("a dead server answered");
  } catch (const edl::StoreError& e) {
    CHECK(std::string(e.what()).find(server.url()) != std::string::npos);
    CHECK(std::string(e.what()).find("EDL_STORE_TIMEOUT_MS") != std::string::npos);
  }
  auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  CHECK(elapsed >= 900);
  CHECK(elapsed < 10000);  // within the deadline + generous slack for a loaded machine
  CHECK_THROWS_AS(s->set("b", "2"), edl::StoreError);  // broken for good, at once
}
