// The straggler rule (src/elastic/straggler.h, docs/observability.md "Stragglers"): factor x median,
// consecutive boundaries, the lower median, unknown times, the 1 ms gap, eviction within --min-np;
// and the worker's StepObserver (verdicts, counters, rank 0's throughput window).
#include <catch2/catch.hpp>

#include <chrono>
#include <sstream>
#include <thread>

#include "edl/error.h"
#include "elastic/step_observer.h"
#include "elastic/straggler.h"

using edl::elastic::StragglerDetector;
using edl::elastic::StragglerOptions;

namespace {

StragglerOptions opts(double factor, int steps, bool evict = false) {
  StragglerOptions o;
  o.factor = factor;
  o.steps = steps;
  o.evict = evict;
  return o;
}

}  // namespace

TEST_CASE("straggler rule: the median is the lower middle value of the known times", "[straggler]") {
  CHECK(StragglerDetector::median({}) == 0);
  CHECK(StragglerDetector::median({0.3}) == 0.3);
  CHECK(StragglerDetector::median({0.5, 0.1}) == 0.1);              // two ranks: the faster is the reference
  CHECK(StragglerDetector::median({0.3, 0.1, 0.2}) == 0.2);
  CHECK(StragglerDetector::median({0.4, 0.1, 0.3, 0.2}) == 0.2);
}

TEST_CASE("straggler rule: slower than factor x median for N consecutive boundaries is reported once",
          "[straggler]") {
  StragglerDetector d(opts(1.5, 3));
  // Rank 2 at 0.16 s against a median of 0.10 s: 1.6 > 1.5.
  const std::vector<double> slow{0.10, 0.10, 0.16};
  CHECK(d.observe(1, slow).empty());
  CHECK(d.consecutive(2) == 1);
  CHECK(d.observe(2, slow).empty());
  auto r = d.observe(3, slow);
  REQUIRE(r.size() == 1);
  CHECK(r[0].rank == 2);
  CHECK(r[0].step == 3);
  CHECK(r[0].step_s == Approx(0.16));
  CHECK(r[0].median_s == Approx(0.10));
  CHECK(r[0].consecutive == 3);
  CHECK(d.persistent() == std::vector<int>{2});
  CHECK(d.observe(4, slow).empty());  // still a straggler, not reported again
  CHECK(d.consecutive(2) == 4);
  // A fast boundary breaks the run; the count starts over.
  CHECK(d.observe(5, {0.10, 0.10, 0.11}).empty());
  CHECK(d.consecutive(2) == 0);
  CHECK(d.persistent().empty());
  CHECK(d.observe(6, slow).empty());
  CHECK(d.observe(7, slow).empty());
  CHECK(d.observe(8, slow).size() == 1);  // a new run is reported again
}

TEST_CASE("straggler rule: at or below the factor is not slow", "[straggler]") {
  StragglerDetector d(opts(1.5, 1));
  CHECK(d.observe(1, {0.100, 0.100, 0.150}).empty());  // exactly 1.5 x: not slow
  CHECK(d.observe(2, {0.100, 0.100, 0.149}).empty());
  CHECK(d.observe(3, {0.100, 0.100, 0.152}).size() == 1);
  StragglerDetector two(opts(2.0, 1));
  CHECK(two.observe(1, {0.100, 0.100, 0.190}).empty());  // the factor is the option's
  CHECK(two.observe(2, {0.100, 0.100, 0.210}).size() == 1);
}

TEST_CASE("straggler rule: unknown times, tiny steps and a single rank are never judged", "[straggler]") {
  StragglerDetector d(opts(1.5, 1));
  CHECK(d.observe(1, {0, 0, 0}).empty());                  // the first boundary of a generation
  CHECK(d.observe(2, {0, 0.010, 0.100}).size() == 1);       // the median of the known ones: 0.010
  CHECK(d.observe(3, {0.000010, 0.000020, 0.000900}).empty());  // 90 x the median but within 1 ms of it
  CHECK(d.observe(4, {0.5}).empty());                       // a world of one has no reference
  CHECK(d.observe(5, {0.5, 0}).empty());                    // one known time: no reference either
}

TEST_CASE("straggler rule: eviction keeps the job at its minimum size, slowest first", "[straggler]") {
  StragglerDetector d(opts(1.5, 2, /*evict=*/true));
  const std::vector<double> two_slow{0.10, 0.30, 0.10, 0.20};
  d.observe(1, two_slow);
  CHECK(d.to_evict(1).empty());  // not persistent yet
  auto r = d.observe(2, two_slow);
  CHECK(r.size() == 2);
  CHECK(d.persistent() == std::vector<int>{1, 3});  // slowest first
  CHECK(d.to_evict(1) == std::vector<int>{1, 3});
  CHECK(d.to_evict(3) == std::vector<int>{1});      // 4 - 3 = room for one
  CHECK(d.to_evict(4).empty());                     // at the minimum: report only
  StragglerDetector report_only(opts(1.5, 2, /*evict=*/false));
  report_only.observe(1, two_slow);
  report_only.observe(2, two_slow);
  CHECK(report_only.persistent().size() == 2);
  CHECK(report_only.to_evict(1).empty());
}

TEST_CASE("straggler rule: reset forgets every run, bad options are refused", "[straggler]") {
  StragglerDetector d(opts(1.5, 2));
  d.observe(1, {0.1, 0.1, 0.3});
  d.reset(2);
  CHECK(d.consecutive(2) == 0);
  d.observe(2, {0.1, 0.3});
  CHECK(d.observe(3, {0.1, 0.3}).size() == 1);
  CHECK_THROWS_AS(StragglerDetector(opts(1.0, 5)), edl::InvalidArgument);
  CHECK_THROWS_AS(StragglerDetector(opts(1.5, 0)), edl::InvalidArgument);
}

TEST_CASE("step observer: verdicts, counters and the throughput window", "[straggler]") {
  StragglerOptions o = opts(1.5, 2, /*evict=*/true);
  edl::elastic::StepObserver obs(o);
  obs.new_generation(3);
  CHECK(obs.measure_compute_us() == 0);  // the first boundary of a generation: unknown
  CHECK(obs.measure_compute_us() >= 1);
  const std::vector<int64_t> us{100000, 100000, 300000};
  auto v = obs.observe(1, us, 2);
  CHECK(v.reports.empty());
  CHECK(v.evict.empty());
  v = obs.observe(2, us, 2);
  REQUIRE(v.reports.size() == 1);
  CHECK(v.reports[0].rank == 2);
  CHECK(v.evict == std::vector<int>{2});
  obs.observe(3, us, 2);  // still to evict at the next boundary: counted once
  auto st = obs.stats();
  CHECK(st.reports == 1);
  CHECK(st.evictions == 1);
  CHECK(st.step_s == std::vector<double>{0.1, 0.1, 0.3});
  CHECK(st.median_s == Approx(0.1));
  obs.new_generation(2);
  CHECK(obs.observe(4, {100000, 300000}, 2).evict.empty());  // at the minimum: never evicted
  // Rank 0's throughput window: opened by the first boundary, published at most every 250 ms.
  CHECK_FALSE(obs.throughput_sample(7, 2, 32).has_value());
  CHECK_FALSE(obs.throughput_sample(7, 2, 32).has_value());  // far less than 250 ms later
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto s = obs.throughput_sample(7, 2, 32);
  REQUIRE(s.has_value());
  std::istringstream in(*s);
  uint64_t gen = 0;
  int size = 0;
  int64_t steps = 0, batch = 0;
  double seconds = 0;
  in >> gen >> size >> steps >> seconds >> batch;
  CHECK(gen == 7);
  CHECK(size == 2);
  CHECK(steps == 2);
  CHECK(seconds >= 0.3);
  CHECK(batch == 32);
}
