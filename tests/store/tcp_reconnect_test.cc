// The embedded TCP store under faults: server restarts, connections dropped between "applied" and
// "reply read" (exactly-once add / compare_set), a store gone past the deadline, and a hostile
// process flooding the server while a job runs (bounded memory).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store/loopback.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "edl/error.h"
#include "edl/store.h"
#include "edl/store_server.h"
#include "elastic/store/tcp_store_auth.h"
#include "elastic/store/tcp_store_frame.h"
#include "store/hostile_client.h"
#include "testing/process.h"

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace st = edl::store;

namespace {

std::shared_ptr<edl::Store> client(const std::string& url, const std::string& secret,
                                   std::chrono::milliseconds reconnect = 10000ms) {
  edl::StoreOptions o;
  o.secret = secret;
  o.connect_timeout = 3000ms;
  o.request_timeout = 10000ms;
  o.reconnect_timeout = reconnect;
  return edl::connect_store(url, o);
}

int listen_any(int* port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0);
  REQUIRE(listen(fd, 64) == 0);
  socklen_t len = sizeof(sa);
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  *port = ntohs(sa.sin_port);
  return fd;
}

int connect_to(int port) { return edl::test::connect_loopback(port); }

std::string le32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = char(v >> (8 * i));
  return s;
}

bool send_all(int fd, const std::string& b) {
  size_t off = 0;
  while (off < b.size()) {
    ssize_t w = ::send(fd, b.data() + off, b.size() - off, MSG_NOSIGNAL);
    if (w <= 0) return false;
    off += static_cast<size_t>(w);
  }
  return true;
}

// A TCP proxy in front of the store that forwards whole frames and, for the requests it is told
// to sabotage, closes both sides right after the server's reply arrived: the server has applied
// the request, the client never reads the reply. Each request id is sabotaged at most once.
class DropProxy {
 public:
  DropProxy(int upstream_port, std::set<st::Op> ops, int every) : upstream_(upstream_port), ops_(ops), every_(every) {
    listen_fd_ = listen_any(&port_);
    thread_ = std::thread([this] { accept_loop(); });
  }
  ~DropProxy() {
    stop_ = true;
    shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();
    close(listen_fd_);
  }
  std::string url() const { return "tcp://127.0.0.1:" + std::to_string(port_); }
  int drops() const { return drops_.load(); }

 private:
  void accept_loop() {
    while (!stop_) {
      int c = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      int u = connect_to(upstream_);
      if (u < 0) {
        close(c);
        continue;
      }
      pump(c, u);  // one connection at a time: the test has one client
      close(c);
      close(u);
    }
  }

  // Forwards frames both ways until either side closes or a reply is sabotaged.
  void pump(int c, int u) {
    st::FrameReader from_client, from_server;
    std::set<uint64_t> marked;
    char buf[65536];
    std::string body;
    while (!stop_) {
      pollfd p[2] = {{c, POLLIN, 0}, {u, POLLIN, 0}};
      if (poll(p, 2, 100) <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t r = recv(p[i].fd, buf, sizeof(buf), 0);
        if (r <= 0) return;
        st::FrameReader& rd = i == 0 ? from_client : from_server;
        rd.feed(buf, static_cast<size_t>(r));
        while (rd.next(&body)) {
          auto m = st::decode_message(body, nullptr);
          if (i == 0 && m && ops_.count(m->op) && !dropped_.count(m->id) && ++seen_ % every_ == 0) marked.insert(m->id);
          if (i == 1 && m && marked.count(m->id)) {
            dropped_.insert(m->id);
            ++drops_;
            return;  // the reply is lost with the connection
          }
          if (!send_all(i == 0 ? u : c, le32(static_cast<uint32_t>(body.size())) + body)) return;
        }
      }
    }
  }

  int upstream_;
  std::set<st::Op> ops_;
  int every_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> drops_{0};
  std::set<uint64_t> dropped_;
  int seen_ = 0;
  std::thread thread_;
};

}  // namespace

TEST_CASE("tcp store: clients continue across a server restart on the same port", "[store][reconnect]") {
  auto server = std::make_unique<edl::StoreServer>(edl::StoreServerOptions{"127.0.0.1", 0, "k"});
  const int port = server->port();
  const std::string url = server->url();
  auto a = client(url, "k");
  auto b = client(url, "k");
  a->set("before", "1");
  std::atomic<bool> waited{false};
  std::atomic<int> errors{0};
  std::thread waiter([&] {
    try {
      waited = b->wait({"after"}, 30s);  // blocked across the restart; resumes on the new server
    } catch (const std::exception&) {
      ++errors;
    }
  });
  std::atomic<bool> stop{false};
  std::atomic<int> ops{0};
  std::thread worker([&] {
    try {
      for (int i = 0; !stop; ++i) {
        a->set("k" + std::to_string(i % 8), std::to_string(i));
        ++ops;
      }
    } catch (const std::exception&) {
      ++errors;
    }
  });
  std::this_thread::sleep_for(100ms);
  server->stop();  // the store goes away (connections closed, port released)
  std::this_thread::sleep_for(300ms);
  edl::StoreServerOptions again{"127.0.0.1", port, "k"};
  server = std::make_unique<edl::StoreServer>(again);
  int ops_at_restart = ops.load();
  auto deadline = Clock::now() + 20s;
  while (ops.load() < ops_at_restart + 100 && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  auto c = client(url, "k");
  c->set("after", "x");
  waiter.join();
  stop = true;
  worker.join();
  CHECK(errors.load() == 0);
  CHECK(waited.load());
  CHECK(ops.load() >= ops_at_restart + 100);
  CHECK(a->add("counter", 5) == 5);  // the restarted embedded store starts empty
  CHECK(b->get("after") == std::optional<std::string>("x"));
}

TEST_CASE("tcp store: add and compare_set across a dropped reply are applied exactly once", "[store][reconnect]") {
  edl::StoreServer server({"127.0.0.1", 0, "k"});
  DropProxy proxy(server.port(), {st::Op::kAdd, st::Op::kCompareSet}, 3);
  auto s = client(proxy.url(), "k");
  auto direct = client(server.url(), "k");
  for (int i = 1; i <= 30; ++i) CHECK(s->add("counter", 1) == i);  // every 3rd reply is lost once
  CHECK(direct->get("counter") == std::optional<std::string>("30"));
  // compare_set chain: a re-applied success would see its own value and fail.
  std::string cur = "0";
  for (int i = 1; i <= 9; ++i) {
    std::optional<std::string> now;
    REQUIRE(s->compare_set("gen", i == 1 ? std::nullopt : std::optional<std::string>(cur), std::to_string(i), &now));
    CHECK(now == std::optional<std::string>(std::to_string(i)));
    cur = std::to_string(i);
  }
  CHECK(direct->get("gen") == std::optional<std::string>("9"));
  CHECK(proxy.drops() >= 13);
  CHECK(server.replay_count() >= static_cast<uint64_t>(proxy.drops()));
}

TEST_CASE("tcp store: a store gone past the deadline gives StoreError naming the URL", "[store][reconnect]") {
  auto server = std::make_unique<edl::StoreServer>(edl::StoreServerOptions{"127.0.0.1", 0, "k"});
  const std::string url = server->url();
  auto s = client(url, "k", 1000ms);
  s->set("a", "1");
  std::string waiter_error;
  std::thread waiter([&] {
    try {
      s->wait({"never"}, 60s);
    } catch (const edl::StoreError& e) {
      waiter_error = e.what();
    }
  });
  std::this_thread::sleep_for(50ms);
  auto t0 = Clock::now();
  server.reset();  // gone for good
  waiter.join();
  auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  CHECK(waiter_error.find(url) != std::string::npos);
  CHECK(waiter_error.find("EDL_STORE_TIMEOUT_MS") != std::string::npos);
  CHECK(elapsed >= 900);    // it did keep trying for the deadline
  CHECK(elapsed < 10000);   // and gave up within it (+ generous slack for a loaded machine)
  try {
    s->get("a");
    FAIL("a dead client answered");
  } catch (const edl::StoreError& e) {
    CHECK(std::string(e.what()).find(url) != std::string::npos);
  }
}

TEST_CASE("tcp store: connection caps and the pre-auth byte budget", "[store][hostile]") {
  edl::StoreServerOptions o{"127.0.0.1", 0, "k"};
  o.max_connections = 6;
  o.max_unauthenticated = 3;
  edl::StoreServer server(o);
  auto good = client(server.url(), "k");
  // Unauthenticated connections beyond 3: the oldest are closed.
  std::vector<int> raw;
  for (int i = 0; i < 5; ++i) raw.push_back(connect_to(server.port()));
  auto deadline = Clock::now() + 5s;
  // The server's loop accepts, counts and evicts asynchronously: wait (bounded) for it to settle.
  while ((server.refused_count() < 2 || server.connection_count() > 4) && Clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  CHECK(server.refused_count() >= 2);
  CHECK(server.connection_count() <= 4);
  for (int fd : raw) close(fd);
  // A connection that streams bytes without authenticating is cut after max_unauthenticated_bytes.
  int fd = connect_to(server.port());
  REQUIRE(fd >= 0);
  std::string frames;
  for (int i = 0; i < 100; ++i) frames += le32(100) + std::string(100, 'x');  // 10 KiB of small frames
  send_all(fd, frames);
  char buf[4096];
  bool closed = false;
  deadline = Clock::now() + 5s;
  while (!closed && Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) == 1) closed = recv(fd, buf, sizeof(buf), 0) <= 0;
  }
  CHECK(closed);
  close(fd);
  good->set("still", "served");
  CHECK(good->get("still") == std::optional<std::string>("served"));
}

TEST_CASE("tcp store: new clients get in while unauthenticated connections churn", "[store][hostile]") {
  edl::StoreServerOptions o{"127.0.0.1", 0, "k"};
  o.max_unauthenticated = 8;
  edl::StoreServer server(o);
  std::atomic<bool> stop{false};
  std::thread churn([&] {  // bursts of 20 silent connections: each burst evicts the oldest handshakes
    while (!stop) {
      std::vector<int> fds;
      for (int i = 0; i < 20; ++i) fds.push_back(connect_to(server.port()));
      std::this_thread::sleep_for(5ms);
      for (int fd : fds)
        if (fd >= 0) close(fd);
    }
  });
  int ok = 0;
  for (int i = 0; i < 10; ++i) {
    auto c = client(server.url(), "k");  // a handshake closed by eviction is retried within connect_timeout
    c->add("joined", 1);
    ++ok;
  }
  stop = true;
  churn.join();
  CHECK(ok == 10);
  CHECK(server.refused_count() > 0);
  CHECK(client(server.url(), "k")->get("joined") == std::optional<std::string>("10"));
}

namespace {

// Runs a StoreServer in a child process (so its memory can be read from /proc); returns the pid.
pid_t spawn_server(const std::string& secret, int* port) {
  int p[2];
  REQUIRE(pipe(p) == 0);
  edl::testing::SpawnOptions o;
  o.own_group = false;
  o.die_with_parent = true;
  const pid_t pid = edl::testing::fork_call(
      [&] {
        close(p[0]);
        edl::StoreServer server({"127.0.0.1", 0, secret});
        int got = server.port();
        if (write(p[1], &got, sizeof(got)) != sizeof(got)) return 1;
        for (;;) pause();
      },
      o);
  close(p[1]);
  REQUIRE(read(p[0], port, sizeof(*port)) == sizeof(*port));
  close(p[0]);
  return pid;
}

}  // namespace

TEST_CASE("tcp store: a job finishes correctly while another process floods the store", "[store][hostile]") {
  const std::string secret = "job-secret";
  int port = 0;
  pid_t server_pid = spawn_server(secret, &port);
  const std::string url = "tcp://127.0.0.1:" + std::to_string(port);
  constexpr int kWorkers = 4, kSteps = 60;
  std::vector<std::shared_ptr<edl::Store>> stores;
  for (int w = 0; w < kWorkers; ++w) stores.push_back(client(url, secret));
  stores[0]->set("warm", std::string(1 << 20, 'w'));  // touch the allocator before the baseline
  long baseline = edl::test::rss_kib(server_pid);

  auto attacker = edl::test::start_flood(port);
  REQUIRE(attacker.pid > 0);
  REQUIRE(edl::test::wait_round(attacker));  // 1,000 hostile connections have hit the store; more follow
  std::atomic<long> peak{baseline};
  std::atomic<bool> done{false};
  std::thread sampler([&] {
    while (!done) {
      peak = std::max(peak.load(), edl::test::rss_kib(server_pid));
      std::this_thread::sleep_for(20ms);
    }
  });
  // The job: every step each worker adds its gradient, arrives at a barrier (the last arrival
  // publishes), then the model is advanced with compare_set by worker 0.
  std::atomic<int> failures{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w)
    workers.emplace_back([&, w] {
      try {
        auto& s = stores[w];
        for (int step = 0; step < kSteps; ++step) {
          std::string k = std::to_string(step);
          s->add("grad/" + k, w + 1);
          if (s->add("arrive/" + k, 1) == kWorkers) s->set("done/" + k, "1");
          if (!s->wait({"done/" + k}, 60s)) ++failures;
          if (w == 0) {
            auto model = s->get("model");
            int64_t next = (model ? std::stoll(*model) : 0) + std::stoll(*s->get("grad/" + k));
            if (!s->compare_set("model", model, std::to_string(next))) ++failures;
          }
        }
      } catch (const std::exception& e) {
        ++failures;
      }
    });
  for (auto& t : workers) t.join();
  done = true;
  sampler.join();
  edl::test::stop_flood(attacker);

  CHECK(failures.load() == 0);
  const int per_step = kWorkers * (kWorkers + 1) / 2;
  for (int step = 0; step < kSteps; ++step)
    CHECK(stores[1]->get("grad/" + std::to_string(step)) == std::optional<std::string>(std::to_string(per_step)));
  CHECK(stores[2]->get("model") == std::optional<std::string>(std::to_string(per_step * kSteps)));
  INFO("server VmRSS baseline " << baseline << " KiB, peak under the flood " << peak.load() << " KiB");
  CHECK(baseline > 0);
  CHECK(peak.load() - baseline < 64 * 1024);  // bounded: 256 handshakes x 4 KiB + bookkeeping
  kill(server_pid, SIGKILL);
  waitpid(server_pid, nullptr, 0);
}
