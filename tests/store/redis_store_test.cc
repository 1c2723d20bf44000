// Redis backend specifics (the shared conformance suite covers the Store semantics).
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "edl/error.h"
#include "edl/store.h"
#include "store/redis_server.h"
#include "testing/require_dep.h"

using namespace std::chrono_literals;

TEST_CASE("redis store: wrong or missing password gives AuthError", "[store][redis]") {
  auto& server = edl::test::RedisServer::shared();
  if (!edl::testing::require_dep("redis-server", server.available(), "Debian package redis-server")) return;
  edl::StoreOptions o;
  o.secret = "not-the-password";
  CHECK_THROWS_AS(edl::connect_store(server.url(), o), edl::AuthError);
  o.secret = "";
  CHECK_THROWS_AS(edl::connect_store(server.url(), o), edl::AuthError);
}

TEST_CASE("redis store: server death fails waiters and calls with StoreError", "[store][redis]") {
  edl::test::RedisServer server("pw");
  if (!edl::testing::require_dep("redis-server", server.available(), "Debian package redis-server")) return;
  edl::StoreOptions o;
  o.secret = "pw";
  o.request_timeout = 3000ms;
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
