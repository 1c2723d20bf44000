// The simulator's cost models: the scaling-curve fit, the pause table and the JSONL loaders.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <string>
#include <unistd.h>

#include "cluster_sim.h"

namespace sim = edl::bench::sim;

namespace {

// A temporary file removed when the object goes out of scope (also on a failed REQUIRE).
struct TempFile {
  std::string path;
  explicit TempFile(const std::string& text) {
    path = "/tmp/edl_cluster_sim_test_" + std::to_string(getpid()) + "_" + std::to_string(counter()++) + ".jsonl";
    std::ofstream(path) << text;
  }
  ~TempFile() { std::remove(path.c_str()); }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

}  // namespace

TEST_CASE("scaling curve keeps measured points and extrapolates with the fitted ring model", "[cluster_sim]") {
  SECTION("one measured point: bandwidth term only") {
    sim::ScalingCurve c = sim::ScalingCurve::fit({{1, 1.0}, {2, 1.6}});
    CHECK(c.speedup(2) == Approx(1.6));
    CHECK(c.alpha() == Approx(2 / 1.6 - 1));
    CHECK(c.beta() == 0);
    CHECK(c.speedup(4) == Approx(4 / (1 + c.alpha() * 1.5)));
    CHECK(c.speedup(4) > c.speedup(2));
  }
  SECTION("synthetic alpha and beta are recovered") {
    auto model = [](int k) { return k / (1 + 0.2 * 2.0 * (k - 1) / k + 0.05 * (k - 1)); };
    sim::ScalingCurve c = sim::ScalingCurve::fit({{2, model(2)}, {4, model(4)}, {8, model(8)}});
    CHECK(c.alpha() == Approx(0.2).margin(1e-9));
    CHECK(c.beta() == Approx(0.05).margin(1e-9));
    CHECK(c.speedup(6) == Approx(model(6)));
  }
  SECTION("oversubscribed points above fit_max_workers are ignored") {
    sim::ScalingCurve c = sim::ScalingCurve::fit({{2, 1.9}, {4, 1.1}}, 2);
    CHECK(c.points().count(4) == 0);
    CHECK(c.speedup(4) > 3.5);
  }
  SECTION("perfect scaling stays perfect; bad points are rejected") {
    CHECK(sim::ScalingCurve::fit({{2, 2.0}}).speedup(8) == Approx(8.0));
    CHECK_THROWS_WITH(sim::ScalingCurve::fit({{2, -1.0}}), Catch::Contains("workers=2"));
    CHECK_THROWS(sim::ScalingCurve::fit({{0, 1.0}}));
  }
}

TEST_CASE("pause model interpolates, extrapolates and falls back to rendezvous rows", "[cluster_sim]") {
  sim::PauseModel m;
  CHECK_THROWS_WITH(m.shrink(3, 2), Catch::Contains("no rows"));
  m.add("rendezvous", 2, {0.4, 0});
  m.add("rendezvous", 4, {1.2, 0});
  CHECK(m.shrink(4, 3).seconds == Approx(0.8));  // no shrink rows: rendezvous at 3 ranks
  CHECK(m.grow(4, 8).seconds == Approx(2.8));    // extrapolated from 2 and 4
  m.add("shrink", 2, {0.5, 1});
  m.add("shrink", 2, {0.7, 3});
  m.add("shrink", 2, {0.6, 2});
  CHECK(m.shrink(3, 2).seconds == Approx(0.6));  // median of the three
  CHECK(m.shrink(3, 2).lost_steps == Approx(2));
  CHECK(m.shrink(6, 5).seconds == Approx(0.6));  // one point: constant
  CHECK(m.grow(1, 2).lost_steps == 0);
  CHECK_THROWS(m.add("bogus", 1, {}));
}

TEST_CASE("loaders read scaling_bench and elastic_bench rows and name bad lines", "[cluster_sim]") {
  TempFile scaling(
      "{\"model\":\"resnet20\",\"workers\":1,\"link\":\"loopback\",\"images_per_s\":200,\"speedup\":1,\"comm_share\":0}\n"
      "{\"model\":\"resnet20\",\"workers\":2,\"link\":\"loopback\",\"images_per_s\":380,\"speedup\":1.9,\"comm_share\":0.05}\n"
      "{\"model\":\"resnet20\",\"workers\":2,\"link\":\"1gbit\",\"images_per_s\":300,\"speedup\":1.5,\"comm_share\":0.2}\n"
      "\n"
      "{\"model\":\"mobilenetv2\",\"workers\":1,\"link\":\"loopback\",\"images_per_s\":50,\"speedup\":1,\"comm_share\":0}\n");
  sim::ScalingRows r = sim::load_scaling(scaling.path, "resnet20", "loopback");
  CHECK(r.images_per_s_1 == Approx(200));
  CHECK(r.speedup.at(2) == Approx(1.9));
  CHECK_THROWS_WITH(sim::load_scaling(scaling.path, "resnet20", "10gbit"), Catch::Contains("workers 1"));
  CHECK_THROWS_WITH(sim::load_scaling("/nonexistent/x.jsonl", "a", "b"), Catch::Contains("cannot open"));

  TempFile elastic(
      "{\"event\":\"kill\",\"ranks_before\":3,\"ranks_after\":2,\"recovery_ms\":400,\"lost_steps\":1}\n"
      "{\"event\":\"stop\",\"ranks_before\":3,\"ranks_after\":2,\"recovery_ms\":4000,\"lost_steps\":1}\n"
      "{\"event\":\"join\",\"ranks_before\":2,\"ranks_after\":3,\"recovery_ms\":900,\"lost_steps\":0}\n"
      "{\"event\":\"rerendezvous\",\"ranks\":4,\"time_ms\":50}\n");
  sim::PauseModel m = sim::load_pauses(elastic.path);
  CHECK(m.shrink(3, 2).seconds == Approx(0.4));  // the SIGSTOP row is not a preemption
  CHECK(m.shrink(3, 2).lost_steps == Approx(1));
  CHECK(m.grow(2, 3).seconds == Approx(0.9));
  CHECK(m.table("rendezvous").at(4).front().seconds == Approx(0.05));

  TempFile bad("{\"event\":\"kill\",\"ranks_before\":3,\"ranks_after\":2,\"recovery_ms\":400}\nnot json\n");
  CHECK_THROWS_WITH(sim::load_pauses(bad.path), Catch::Contains(":2:"));
  TempFile wrong_type("{\"event\":\"kill\",\"ranks_before\":\"three\",\"ranks_after\":2,\"recovery_ms\":1}\n");
  CHECK_THROWS_WITH(sim::load_pauses(wrong_type.path), Catch::Contains(":1: bad field"));
  TempFile none("{\"model\":\"x\"}\n");
  CHECK_THROWS_WITH(sim::load_pauses(none.path), Catch::Contains("no kill, join or rerendezvous"));
}
