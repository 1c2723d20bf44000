// The elastic worker's timeline events (docs/observability.md, "Timeline"): rendezvous, connect,
// state sync, recovery and commit, each with its generation number, for thread-workers of which
// one dies mid-job.
#include <catch2/catch.hpp>
#include <cstdio>
#include <set>

#include "common/timeline.h"
#include "common/timeline_file.h"
#include "harness.h"

using namespace edl::elastic::testing;
using edl::elastic::Worker;
using edl::test::events_named;
using edl::test::read_timeline;
namespace timeline = edl::timeline;

TEST_CASE("timeline: rendezvous, state sync, recovery and commit carry the generation", "[timeline][scenario]") {
  const std::string path = edl::test::temp_path("elastic");
  timeline::Options o;
  o.path = path;
  timeline::start(o);
  {
    Cluster c("tl_kill", 2, 3);
    std::atomic<bool> done{false};
    c.on_step = [&](int, Worker& w, int64_t step) {
      if (w.view().rank == 1 && step == 10 && !done.exchange(true)) w.simulate_crash();
    };
    for (int i = 0; i < 3; ++i) c.start();
    c.check_finishers(2);
  }
  timeline::stop();
  auto all = read_timeline(path);

  std::set<int64_t> formed;  // generations some rendezvous formed
  for (const auto& e : events_named(all, "rendezvous")) {
    CHECK(e["args"]["generation"].get<int64_t>() >= 0);
    CHECK(e["args"]["size"].get<int>() >= 2);
    formed.insert(e["args"]["generation"].get<int64_t>());
  }
  REQUIRE_FALSE(formed.empty());
  const int64_t first = *formed.begin(), last = *formed.rbegin();
  CHECK(first >= 1);  // generation ids start at 1 (docs/elastic.md)
  CHECK(last > first);  // the crash forced at least one new generation

  auto recovery = events_named(all, "recovery");
  CHECK(recovery.size() >= 2);  // both survivors
  for (const auto& e : recovery) {
    CHECK(e["args"]["generation"].get<int64_t>() > e["args"]["previous_generation"].get<int64_t>());
    CHECK(formed.count(e["args"]["generation"].get<int64_t>()) == 1);
    CHECK(e["args"]["size"] == 2);
  }
  std::set<int64_t> synced;
  for (const auto& e : events_named(all, "state sync")) synced.insert(e["args"]["generation"].get<int64_t>());
  CHECK(synced.count(first) == 1);
  CHECK(synced.count(last) == 1);
  CHECK(events_named(all, "connect").size() >= 3);

  auto commits = events_named(all, "commit");
  int64_t max_step = -1;
  bool commit_in_last = false;
  for (const auto& e : commits) {
    max_step = std::max(max_step, e["args"]["step"].get<int64_t>());
    commit_in_last = commit_in_last || e["args"]["generation"].get<int64_t>() == last;
    CHECK(e["dur"].get<int64_t>() >= 0);
  }
  CHECK(max_step == 40);  // Cluster::total
  CHECK(commit_in_last);
  std::remove(path.c_str());
}
