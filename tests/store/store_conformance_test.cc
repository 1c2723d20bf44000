// One conformance suite for every Store backend: memory, the embedded TCP server, a real redis-server,
// a real 3-member etcd cluster and a single etcd member.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>
#include <vector>

#include "edl/error.h"
#include "edl/store.h"
#include "edl/store_server.h"
#include "testing/etcd_cluster.h"
#include "testing/redis_server.h"
#include "testing/require_dep.h"

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

int64_t ms_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

struct MemoryBackend {
  static constexpr const char* name = "memory";
  std::shared_ptr<edl::Store> store = edl::make_memory_store();
  bool available() const { return true; }
  std::shared_ptr<edl::Store> connect() { return store; }  // clients share the one instance
};

struct TcpBackend {
  static constexpr const char* name = "tcp";
  edl::StoreServer server{edl::StoreServerOptions{"127.0.0.1", 0, "s3cret"}};
  bool available() const { return true; }
  std::shared_ptr<edl::Store> connect() {
    edl::StoreOptions o;
    o.secret = "s3cret";
    return edl::connect_store(server.url(), o);
  }
};

struct RedisBackend {
  static constexpr const char* name = "redis";
  edl::testing::RedisServer& server = edl::testing::RedisServer::shared();
  RedisBackend() {
    if (server.available()) server.flush();
  }
  bool available() const {
    return edl::testing::require_dep("redis-server", server.available(), "Debian package redis-server");
  }
  std::shared_ptr<edl::Store> connect() {
    edl::StoreOptions o;
    o.secret = "redis-secret";
    return edl::connect_store(server.url(), o);
  }
};

template <bool kSingle>
struct EtcdBackendT {
  static constexpr const char* name = kSingle ? "etcd-1" : "etcd-3";
  edl::testing::EtcdCluster& cluster = kSingle ? edl::testing::EtcdCluster::shared_single() : edl::testing::EtcdCluster::shared();
  std::atomic<int> next{0};  // connect() is called from several threads
  EtcdBackendT() {
    if (cluster.available()) cluster.clear();
  }
  bool available() const {
    return edl::testing::require_dep("etcd", cluster.available(), "Debian package etcd-server");
  }
  // Clients spread over the members: each lists a different one first.
  std::shared_ptr<edl::Store> connect() { return edl::connect_store(cluster.url(next++ % cluster.size())); }
};
using EtcdBackend = EtcdBackendT<false>;
using EtcdSingleBackend = EtcdBackendT<true>;

}  // namespace

#define BACKENDS MemoryBackend, TcpBackend, RedisBackend, EtcdBackend, EtcdSingleBackend

TEMPLATE_TEST_CASE("store: set/get/del/keys", "[store]", BACKENDS) {
  TestType b;
  if (!b.available()) return;
  auto s = b.connect();
  CHECK_FALSE(s->get("a").has_value());
  s->set("a", "1");
  s->set("a", "2");
  CHECK(s->get("a") == std::optional<std::string>("2"));
  std::string binary("x\0y\xff", 4);
  s->set("bin", binary);
  CHECK(s->get("bin") == std::optional<std::string>(binary));
  s->set("empty", "");
  CHECK(s->get("empty") == std::optional<std::string>(""));
  s->set("p/2", "b");
  s->set("p/1", "a");
  s->set("p*", "glob chars are literal");
  s->set("q/1", "c");
  CHECK(s->keys("p/") == std::vector<std::string>{"p/1", "p/2"});
  CHECK(s->keys("p*") == std::vector<std::string>{"p*"});
  CHECK(s->keys("zzz").empty());
  CHECK(s->del("p/1"));
  CHECK_FALSE(s->del("p/1"));
  CHECK(s->keys("p/") == std::vector<std::string>{"p/2"});
  CHECK_FALSE(s->get("p/1").has_value());
}

TEMPLATE_TEST_CASE("store: add", "[store]", BACKENDS) {
  TestType b;
  if (!b.available()) return;
  auto s = b.connect();
  CHECK(s->add("n", 5) == 5);
  CHECK(s->add("n", -7) == -2);
  CHECK(s->get("n") == std::optional<std::string>("-2"));
  s->set("text", "hello");
  CHECK_THROWS_AS(s->add("text", 1), edl::InvalidArgument);
  CHECK(s->get("text") == std::optional<std::string>("hello"));
}

TEMPLATE_TEST_CASE("store: compare_set", "[store]", BACKENDS) {
  TestType b;
  if (!b.available()) return;
  auto s = b.connect();
  std::optional<std::string> cur;
  CHECK(s->compare_set("g", std::nullopt, "1", &cur));
  CHECK(cur == std::optional<std::string>("1"));
  CHECK_FALSE(s->compare_set("g", std::nullopt, "9", &cur));
  CHECK(cur == std::optional<std::string>("1"));
  CHECK_FALSE(s->compare_set("g", std::string("0"), "9", &cur));
  CHECK(cur == std::optional<std::string>("1"));
  CHECK(s->compare_set("g", std::string("1"), "2"));
  CHECK(s->get("g") == std::optional<std::string>("2"));
  CHECK_FALSE(s->compare_set("absent", std::string("x"), "y", &cur));
  CHECK_FALSE(cur.has_value());
  CHECK_FALSE(s->get("absent").has_value());
}

TEMPLATE_TEST_CASE("store: concurrent add from threads is atomic", "[store]", BACKENDS) {
  TestType b;
  if (!b.available()) return;
  constexpr int kThreads = 6, kIters = 150;
  auto shared = b.connect();
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      auto s = (t % 2 == 0) ? shared : b.connect();  // half share one client, half have their own
      for (int i = 0; i < kIters; ++i) s->add("counter", 1);
    });
  }
  for (auto& t : ts) t.join();
  CHECK(shared->get("counter") == std::optional<std::string>(std::to_string(kThreads * kIters)));
}

TEMPLATE_TEST_CASE("store: compare_set races elect exactly one winner per generation", "[store]", BACKENDS) {
  TestType b;
  if (!b.available()) return;
  constexpr int kThreads = 6, kBumps = 40;
  std::atomic<int> wins{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&] {
      auto s = b.connect();
      for (;;) {
        auto cur = s->get("gen");
        int g = cur ? std::stoi(*cur) : 0;
        if (g >= kBumps) return;
        if (s->compare_set("gen", cur, std::to_string(g + 1))) ++wins;
      }
    });
  }
  for (auto& t : ts) t.join();
  CHECK(wins.load() == kBumps);
  CHECK(b.connect()->get("gen") == std::optional<std::string>(std::to_string(kBumps)));
}

TEMPLATE_TEST_CASE("store: wait wakes on set and times out", "[store]", BACKENDS) {
  TestType b;
  if (!b.available()) return;
  auto s = b.connect();
  s->set("k1", "x");
  CHECK(s->wait({"k1"}, 0ms));
  CHECK(s->wait({}, 0ms));

  auto t0 = Clock::now();
  CHECK_FALSE(s->wait({"k1", "never"}, 150ms));
  auto waited = ms_since(t0);
  CHECK(waited >= 140);
  CHECK(waited < 3000);

  std::thread setter([&] {
    auto s2 = b.connect();
    std::this_thread::sleep_for(50ms);
    s2->set("k2", "a");
    std::this_thread::sleep_for(50ms);
    s2->set("k3", "b");
  });
  t0 = Clock::now();
  CHECK(s->wait({"k1", "k2", "k3"}, 10s));
  CHECK(ms_since(t0) < 5000);
  setter.join();
}

TEMPLATE_TEST_CASE("store: a blocked wait does not block other calls on the same client", "[store]", BACKENDS) {
  TestType b;
  if (!b.available()) return;
  auto s = b.connect();
  std::atomic<bool> done{false};
  std::thread waiter([&] {
    CHECK(s->wait({"late"}, 10s));
    done = true;
  });
  std::this_thread::sleep_for(30ms);
  auto t0 = Clock::now();
  for (int i = 0; i < 20; ++i) s->set("other" + std::to_string(i), "v");  // same instance, while waiting
  CHECK(ms_since(t0) < 2000);
  CHECK_FALSE(done.load());
  s->set("late", "now");
  waiter.join();
  CHECK(done.load());
}

TEMPLATE_TEST_CASE("store: wait_change wakes on set, del and times out", "[store]", BACKENDS) {
  TestType b;
  if (!b.available()) return;
  auto s = b.connect();
  // Differs already: returns at once.
  s->set("w", "1");
  CHECK(s->wait_change("w", std::nullopt, 0ms) == std::optional<std::string>("1"));
  // Timeout returns the unchanged value.
  auto t0 = Clock::now();
  CHECK(s->wait_change("w", std::string("1"), 120ms) == std::optional<std::string>("1"));
  CHECK(ms_since(t0) >= 110);
  // A set of the same value is not a change; a different value is.
  std::thread writer([&] {
    auto s2 = b.connect();
    std::this_thread::sleep_for(40ms);
    s2->set("w", "1");
    std::this_thread::sleep_for(40ms);
    s2->set("w", "2");
  });
  CHECK(s->wait_change("w", std::string("1"), 10s) == std::optional<std::string>("2"));
  writer.join();
  // Deletion is a change to "absent".
  std::thread deleter([&] {
    std::this_thread::sleep_for(40ms);
    b.connect()->del("w");
  });
  CHECK_FALSE(s->wait_change("w", std::string("2"), 10s).has_value());
  deleter.join();
}

TEMPLATE_TEST_CASE("store: lease expiry deletes the key and wakes a waiter", "[store]", BACKENDS) {
  TestType b;
  if (!b.available()) return;
  auto s = b.connect();
  CHECK_THROWS_AS(s->set_lease("bad", "v", 0ms), edl::InvalidArgument);
  s->set_lease("alive", "w1", 600ms);
  CHECK(s->get("alive") == std::optional<std::string>("w1"));
  // Refreshing keeps it alive past the first ttl.
  Clock::time_point last_refresh;
  for (int i = 0; i < 8; ++i) {
    std::this_thread::sleep_for(100ms);
    last_refresh = Clock::now();  // taken before the refresh: expiry is at least 600 ms after it
    s->set_lease("alive", "w1", 600ms);
  }
  CHECK(s->get("alive") == std::optional<std::string>("w1"));
  auto v = s->wait_change("alive", std::string("w1"), 10s);
  auto waited = ms_since(last_refresh);
  CHECK_FALSE(v.has_value());
  CHECK(waited >= 590);
  CHECK(waited < 4000);
  CHECK_FALSE(s->get("alive").has_value());
  CHECK(s->keys("alive").empty());
  // A plain set() over a lease makes the key permanent.
  s->set_lease("perm", "a", 100ms);
  s->set("perm", "b");
  std::this_thread::sleep_for(300ms);
  CHECK(s->get("perm") == std::optional<std::string>("b"));
}

TEMPLATE_TEST_CASE("store: get_many returns every value in order, nullopt for absent keys", "[store]", BACKENDS) {
  TestType b;
  if (!b.available()) return;
  auto s = b.connect();
  CHECK(s->get_many({}).empty());
  std::vector<std::string> keys;
  for (int i = 0; i < 300; ++i) {
    keys.push_back("gm/" + std::to_string(i));
    if (i % 3 != 1) s->set(keys.back(), "v" + std::to_string(i) + std::string(static_cast<size_t>(i % 7), 'x'));
  }
  keys.push_back(keys[5]);  // a key asked twice gets its value twice
  auto v = s->get_many(keys);
  REQUIRE(v.size() == keys.size());
  for (int i = 0; i < 300; ++i) {
    if (i % 3 == 1) {
      CHECK_FALSE(v[static_cast<size_t>(i)].has_value());
    } else {
      REQUIRE(v[static_cast<size_t>(i)].has_value());
      CHECK(*v[static_cast<size_t>(i)] == "v" + std::to_string(i) + std::string(static_cast<size_t>(i % 7), 'x'));
    }
  }
  CHECK(v.back() == v[5]);
  // Concurrent calls on one client, with a wait blocked on it meanwhile: every caller gets its own replies.
  std::thread waiter([&] { s->wait({"gm/never"}, 300ms); });
  std::vector<std::thread> readers;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t)
    readers.emplace_back([&, t] {
      std::vector<std::string> mine;
      for (int i = t; i < 300; i += 4) mine.push_back("gm/" + std::to_string(i));
      for (int round = 0; round < 5; ++round) {
        auto got = s->get_many(mine);
        for (size_t j = 0; j < mine.size(); ++j) {
          const int i = t + 4 * static_cast<int>(j);
          const bool want = i % 3 != 1;
          if (got[j].has_value() != want || (want && got[j]->rfind("v" + std::to_string(i), 0) != 0)) ++wrong;
        }
      }
    });
  for (auto& r : readers) r.join();
  waiter.join();
  CHECK(wrong.load() == 0);
}

TEMPLATE_TEST_CASE("store: get_wait", "[store]", BACKENDS) {
  TestType b;
  if (!b.available()) return;
  auto s = b.connect();
  CHECK_THROWS_AS(s->get_wait("nothing", 50ms), edl::StoreError);
  std::thread setter([&] {
    std::this_thread::sleep_for(30ms);
    b.connect()->set("soon", "here");
  });
  CHECK(s->get_wait("soon", 10s) == "here");
  setter.join();
}
