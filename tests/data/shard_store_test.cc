// The shard dispatcher over the real store backends: the embedded TCP store (in-process StoreServer)
// and a private redis-server (a missing redis-server skips, or fails under EDL_REQUIRE_DEPS=1).
#include <catch2/catch.hpp>

#include "testing/shard_sim.h"
#include "edl/store_server.h"
#include "testing/redis_server.h"
#include "testing/require_dep.h"

namespace {

void run_audit(std::shared_ptr<edl::Store> store, uint64_t seed) {
  edl::testing::SimOptions o;
  o.seed = seed;
  o.records = 400;
  o.records_per_shard = 19;
  o.events = 10;
  o.commit_every = 2;
  o.threads = true;
  o.store = std::move(store);
  edl::testing::Simulation sim(o);
  auto r = sim.run();
  INFO("kills " << r.kills << " joins " << r.joins << " leaves " << r.leaves);
  REQUIRE(r.error.empty());
  REQUIRE(r.epochs.size() == 3);
  for (const auto& e : r.epochs) {
    CHECK(e.trained_once == o.records);
    CHECK(e.trained_twice == 0);
    CHECK(e.never == 0);
  }
}

}  // namespace

TEST_CASE("exactly once over the embedded TCP store", "[data][shards][store]") {
  edl::StoreServerOptions so;
  so.secret = "data-test";
  edl::StoreServer server(so);
  edl::StoreOptions co;
  co.secret = "data-test";
  run_audit(edl::make_prefix_store(edl::connect_store(server.url(), co), "job1/data/"), 41);
}

TEST_CASE("exactly once over redis", "[data][shards][store][redis]") {
  edl::testing::RedisServer redis;
  if (!edl::testing::require_dep("redis-server", redis.available(), "Debian package redis-server")) return;
  run_audit(edl::make_prefix_store(edl::connect_store(redis.url()), "job2/data/"), 42);
}
