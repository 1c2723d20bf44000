// edl-run's observability rules (docs/observability.md): the Autoscaler's s_{k,d} and schedule
// (pure, hand-computed cases), the new flags and variables, and end-to-end jobs of the synthetic
// elastic worker (testing/elastic_worker.cc): a slowed worker is reported, or evicted with
// --evict-stragglers (exactly-once steps and data, identical parameters), and --autoscale moves the local
// slots after a scripted throughput per world size.
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "launcher/autoscaler.h"
#include "launcher/options.h"
#include "launcher/parse_util.h"
#include "launcher/run_util.h"

using namespace std::chrono_literals;
using edl::launcher::Autoscaler;
using edl::launcher::AutoscaleOptions;
using edl::launcher::ThroughputSample;
using edl::test::count_of;
using edl::test::lines_of;
using edl::test::run_edl;

namespace {

const std::string kHelper = EDL_LAUNCHER_HELPER;
const std::string kWorker = EDL_TEST_ELASTIC_WORKER;

AutoscaleOptions autoscale(double S, int d, int64_t K, int max_np, bool probe) {
  AutoscaleOptions o;
  o.threshold = S;
  o.step = d;
  o.interval = K;
  o.min_np = 1;
  o.max_np = max_np;
  o.probe = probe;
  return o;
}

// A sample whose rate is k * steps * batch / seconds.
ThroughputSample sample(uint64_t gen, int k, int64_t steps, double seconds, int64_t batch = 1) {
  ThroughputSample s;
  s.gen = gen;
  s.size = k;
  s.steps = steps;
  s.seconds = seconds;
  s.local_batch = batch;
  return s;
}

bool parse_fails(std::vector<std::string> args) { return !edl::test::parse_launch_options(std::move(args)); }

int64_t reference_hist(int64_t steps) {
  uint64_t h = 0;
  for (int64_t s = 1; s <= steps; ++s) h = h * 1000003u + static_cast<uint64_t>(s);
  return static_cast<int64_t>(h);
}

// elastic_worker's "done <worker> <step> <crc> <hist>" lines (relayed on edl-run's stderr):
// worker -> "<step> <crc> <hist>".
std::map<std::string, std::string> done_lines(const std::string& err) {
  std::map<std::string, std::string> m;
  for (const auto& line : lines_of(err)) {
    auto p = line.find("] done ");
    if (p == std::string::npos) continue;
    std::string rest = line.substr(p + 7);
    auto sp = rest.find(' ');
    m[rest.substr(0, sp)] = rest.substr(sp + 1);
  }
  return m;
}

// Every finishing worker holds the same parameters, applied every step exactly once (the step-history
// hash of its final step) and, with --records, trained every record exactly once (its "audit" line).
void check_exactly_once(const std::string& err, size_t min_finishers, uint64_t records) {
  auto done = done_lines(err);
  CHECK(done.size() >= min_finishers);
  std::set<std::string> finals;
  for (const auto& [w, v] : done) finals.insert(v);
  CHECK(finals.size() == 1);
  for (const auto& v : finals) {
    const int64_t steps = std::stoll(v.substr(0, v.find(' ')));
    CHECK(steps > 0);
    CHECK(v.substr(v.rfind(' ') + 1) == std::to_string(reference_hist(steps)));
  }
  size_t audits = 0;
  for (const auto& line : lines_of(err)) {
    auto p = line.find("] audit ");
    if (p == std::string::npos) continue;
    ++audits;
    std::istringstream in(line.substr(p + 8));
    std::string worker;
    uint64_t once = 0, total = 0;
    in >> worker >> once >> total;
    INFO(line);
    CHECK(total == records);
    CHECK(once == records);
  }
  CHECK(audits == done.size());
}

}  // namespace

TEST_CASE("autoscaler: s_{k,d} by hand", "[autoscale]") {
  // R_1 = 100, R_2 = 180: the second worker adds 80 = 0.8 of a worker's 100.
  CHECK(Autoscaler::efficiency(100, 180, 1, 1) == Approx(0.8));
  // R_2 = 180 (90 per worker), R_4 = 300: 60 per added worker = 0.667 of 90.
  CHECK(Autoscaler::efficiency(180, 300, 2, 2) == Approx(60.0 / 90.0));
  CHECK(Autoscaler::efficiency(200, 200, 2, 1) == Approx(0.0));     // no gain
  CHECK(Autoscaler::efficiency(200, 150, 2, 1) == Approx(-0.5));    // a loss
  CHECK(Autoscaler::efficiency(100, 200, 1, 1) == Approx(1.0));     // linear
}

TEST_CASE("autoscaler: R_k from the samples, per world size over generations", "[autoscale]") {
  Autoscaler a(autoscale(0.7, 1, 1000, 4, false));
  a.observe(sample(1, 2, 10, 1.0, 32));  // 2 x 10 x 32 / 1 s = 640 samples/s
  a.observe(sample(1, 2, 20, 2.5, 32));  // replaces the older sample of generation 1: 512
  CHECK(a.rates().at(2) == Approx(512));
  a.observe(sample(1, 2, 15, 1.0, 32));  // an older (fewer steps) sample of the generation is ignored
  CHECK(a.rates().at(2) == Approx(512));
  a.observe(sample(3, 2, 20, 1.5, 32));  // another generation of 2: (1280 + 1280) / (2.5 + 1.5) = 640
  CHECK(a.rates().at(2) == Approx(640));
  a.observe(sample(2, 3, 10, 1.0));      // no local batch: batches x workers / s
  CHECK(a.rates().at(3) == Approx(30));
  CHECK(a.rates_text() == "2:640.000,3:30.000");
  CHECK(a.recommended_world_size() == 0);  // no generation ran K = 1000 steps yet
  CHECK(edl::launcher::parse_throughput("4 2 10 1.5 32").has_value());
  CHECK(edl::launcher::parse_throughput("4 2 10 1.5 32")->seconds == Approx(1.5));
  CHECK_FALSE(edl::launcher::parse_throughput("4 2 10").has_value());
  CHECK_FALSE(edl::launcher::parse_throughput("4 0 10 1.5 0").has_value());
  CHECK_FALSE(edl::launcher::parse_throughput("4 2 10 1.5 0 extra").has_value());
}

TEST_CASE("autoscaler: probes out while s_{k,d} > S, then scales back in", "[autoscale]") {
  Autoscaler a(autoscale(0.7, 1, 10, 4, /*probe=*/true));
  CHECK_FALSE(a.observe(sample(1, 1, 9, 1.0)));     // K = 10 steps not reached: no decision
  CHECK(a.observe(sample(1, 1, 10, 1.0)));          // R_1 = 10, R_2 unknown: probe 2
  CHECK(a.recommended_world_size() == 2);
  CHECK(a.last().reason.find("probe") != std::string::npos);
  CHECK(a.observe(sample(2, 2, 10, 1.1)));          // R_2 = 18.18: s_{1,1} = 0.818 > 0.7 stays; probe 3
  CHECK(a.recommended_world_size() == 3);
  CHECK(a.observe(sample(3, 3, 10, 1.5)));          // R_3 = 20: s_{2,1} = (20 - 18.18) / 9.09 = 0.2 <= 0.7
  CHECK(a.recommended_world_size() == 2);
  CHECK(a.last().efficiency == Approx(0.2).epsilon(0.01));
  CHECK(a.last().reason.find("scale in") != std::string::npos);
  CHECK_FALSE(a.observe(sample(4, 2, 10, 1.1)));    // back at 2: s_{2,1} = 0.2 -> stay (unchanged)
  CHECK(a.recommended_world_size() == 2);
  CHECK(a.last().decision == 4);                     // every decision is numbered, changed or not
  CHECK(a.last().reason.find("stay") != std::string::npos);
}

TEST_CASE("autoscaler: scale out on a known rate, by d workers", "[autoscale]") {
  Autoscaler a(autoscale(0.7, 2, 10, 0, /*probe=*/false));
  a.observe(sample(1, 4, 10, 1.0));                 // R_4 = 40
  a.observe(sample(2, 2, 10, 1.0));                 // R_2 = 20 -> decide at 2: s_{2,2} = (40-20)/2 / 10 = 1.0
  CHECK(a.recommended_world_size() == 4);
  CHECK(a.last().efficiency == Approx(1.0));
  Autoscaler no_probe(autoscale(0.7, 1, 10, 0, false));
  no_probe.observe(sample(1, 2, 10, 1.0));          // R_3 unknown and no probes: stay
  CHECK(no_probe.recommended_world_size() == 2);
  CHECK(no_probe.last().reason.find("unknown") != std::string::npos);
}

TEST_CASE("autoscaler: the threshold S decides", "[autoscale]") {
  // R_1 = 10, R_2 = 18: s_{1,1} = 0.8.
  for (double S : {0.7, 0.9}) {
    Autoscaler a(autoscale(S, 1, 10, 2, false));
    a.observe(sample(1, 1, 10, 1.0));
    a.observe(sample(2, 2, 10, 20.0 / 18.0));
    INFO("S = " << S);
    CHECK(a.recommended_world_size() == (S < 0.8 ? 2 : 1));  // at 2: scale in only when s_{1,1} <= S
  }
  // R_2 = 30, R_3 = 31.5: s_{2,1} = 1.5 / 15 = 0.1. At 3, S = 0 keeps the third worker, S = 0.7 does not.
  for (double S : {0.0, 0.7}) {
    Autoscaler a(autoscale(S, 1, 10, 3, false));
    a.observe(sample(1, 2, 10, 20.0 / 30.0));
    a.observe(sample(2, 3, 10, 30.0 / 31.5));
    INFO("S = " << S);
    CHECK(a.last().efficiency == Approx(0.1));
    CHECK(a.recommended_world_size() == (S == 0.0 ? 3 : 2));
  }
}

TEST_CASE("autoscaler: decisions every K steps of a generation", "[autoscale]") {
  Autoscaler a(autoscale(0.7, 1, 20, 2, false));
  a.observe(sample(1, 1, 20, 1.0));        // decides at 20 steps: stay (R_2 unknown)
  CHECK(a.recommended_world_size() == 1);
  a.observe(sample(2, 2, 19, 1.0));        // generation 2 at 19 < K: no decision
  CHECK(a.recommended_world_size() == 1);
  a.observe(sample(2, 2, 20, 20.0 / 19.0));  // R_2 = 38 from this generation's window... decide: s_{1,1} = 0.9 > 0.7
  CHECK(a.recommended_world_size() == 2);
  a.observe(sample(3, 1, 30, 3.0));        // next decision of generation 3 at 20, then at 40
  CHECK(a.recommended_world_size() == 2);  // at 1: R_2 known, s_{1,1} > S -> scale out
  a.observe(sample(4, 2, 39, 4.0));
  a.observe(sample(4, 2, 20, 1.0));        // older sample: ignored
  CHECK(a.last().gen == 4);
}

TEST_CASE("autoscaler: --max-global-batch keeps the local batch fixed up to that global batch", "[autoscale]") {
  AutoscaleOptions o = autoscale(0.7, 1, 10, 8, /*probe=*/true);
  o.max_global_batch = 96;
  Autoscaler a(o);
  CHECK(a.max_world_size(32) == 3);        // 3 x 32 = 96
  CHECK(a.max_world_size(0) == 8);         // local batch unknown: --max-np only
  CHECK(a.max_world_size(200) == 1);       // never below the minimum
  a.observe(sample(1, 3, 10, 1.0, 32));    // at 3 x 32 = 96: no probe of 4
  CHECK(a.recommended_world_size() == 3);
  CHECK(a.last().reason.find("--max-global-batch") != std::string::npos);
  a.observe(sample(2, 2, 10, 1.0, 32));    // R_2 = 640, R_3 = 960: s_{2,1} = 1.0 > 0.7: back out to 3, not 4
  CHECK(a.recommended_world_size() == 3);
  Autoscaler b(o);
  b.observe(sample(1, 3, 10, 1.2, 32));    // R_3 = 800
  b.observe(sample(2, 2, 10, 1.0, 32));    // R_2 = 640: s_{2,1} = 160 / 320 = 0.5 <= 0.7: stay at 2
  CHECK(b.recommended_world_size() == 2);
}

TEST_CASE("edl-run observability flags: parsing and bad values", "[launcher][autoscale]") {
  auto parsed = edl::test::parse_launch_options(
      {"--min-np", "1", "--max-np", "4", "-np", "1", "--straggler-factor", "2.5", "--straggler-steps", "7",
       "--evict-stragglers", "--rebalance-stragglers", "--autoscale", "--scaling-threshold", "0.5", "--scaling-step",
       "2", "--scaling-interval", "30", "--max-global-batch", "256", "prog"});
  REQUIRE(parsed);
  const edl::launcher::LaunchOptions& o = *parsed;
  CHECK(o.straggler_factor == 2.5);
  CHECK(o.straggler_steps == 7);
  CHECK(o.evict_stragglers);
  CHECK(o.rebalance_stragglers);
  CHECK(o.autoscale);
  CHECK(o.scaling_threshold == 0.5);
  CHECK(o.scaling_step == 2);
  CHECK(o.scaling_interval == 30);
  CHECK(o.max_global_batch == 256);
  CHECK(parse_fails({"-np", "2", "--autoscale", "p"}));  // elastic only
  CHECK(parse_fails({"-np", "2", "--rebalance-stragglers", "p"}));
  CHECK(parse_fails({"--min-np", "1", "--host-discovery-script", "x", "--autoscale", "p"}));
}

TEST_CASE("edl-run: bad values of the observability flags and variables exit 2 naming them", "[launcher][autoscale]") {
  const std::vector<std::pair<std::string, std::string>> bad{
      {"--straggler-factor", "1"},   {"--straggler-factor", "x"}, {"--straggler-steps", "0"},
      {"--scaling-threshold", "1.5"}, {"--scaling-threshold", "-0.1"}, {"--scaling-step", "0"},
      {"--scaling-interval", "0"},   {"--max-global-batch", "-1"}};
  for (const auto& [flag, value] : bad) {
    auto r = run_edl({"--min-np", "1", "-np", "1", flag, value, kHelper, "env"}, 10s);
    INFO(flag << " " << value << ": " << r.err);
    CHECK(r.code == 2);
    CHECK(r.err.find(flag) != std::string::npos);
  }
  for (const std::string var : {"EDL_STRAGGLER_FACTOR=0.9", "EDL_STRAGGLER_STEPS=0", "EDL_EVICT_STRAGGLERS=maybe",
                                "EDL_REBALANCE_STRAGGLERS=maybe", "EDL_DETERMINISTIC=2"}) {
    auto r = run_edl({"--min-np", "1", "-np", "1", kHelper, "env"}, 10s, {var});
    INFO(var << ": " << r.err);
    CHECK(r.code == 2);
    CHECK(r.err.find(var.substr(0, var.find('='))) != std::string::npos);
  }
}

TEST_CASE("edl-run elastic: a slowed worker is reported as a straggler", "[launcher][straggler]") {
  // Factor 3, not the default 1.5, and the slowed worker 80 ms slower: the healthy workers' compute
  // (~1 ms: they wait for the slowed one inside the allreduce) grows by up to tens of ms on a loaded
  // machine, so a boundary at which the slowed worker is below 3 x the median can end its slow run;
  // it is then reported again when a new run reaches 5 (the rule: once per run). So the checks: it is
  // reported, only it, never for another worker, and never twice within one run (two reports of one
  // generation are at least --straggler-steps + 1 boundaries apart: a fast boundary, then 5 slow ones).
  const int steps = 5;
  auto r = run_edl({"--hostname", "t", "--min-np", "2", "--max-np", "3", "-np", "3", "--straggler-steps",
                    std::to_string(steps), "--straggler-factor", "3", kWorker, "--steps", "100000", "--step-ms", "10",
                    "--params", "1024", "--records", "720", "--slow-worker", "t:2.0", "--slow-ms", "80"},
                   120s);
  INFO(r.err);
  CHECK(r.code == 0);
  std::map<uint64_t, std::vector<int64_t>> report_steps;  // gen -> boundary steps of its reports
  for (const auto& line : lines_of(r.err)) {
    if (line.find("event=straggler ") == std::string::npos) continue;
    INFO(line);
    CHECK(line.find(" worker=t:2.0 step_ms=") != std::string::npos);  // its rank depends on the arrival order
    CHECK(line.find("steps=5 action=report") != std::string::npos);
    uint64_t gen = 0;
    int64_t step = -1;
    std::istringstream words(line.substr(line.find("event=straggler ")));
    for (std::string w; words >> w;) {
      if (w.rfind("gen=", 0) == 0) gen = std::stoull(w.substr(4));
      if (w.rfind("step=", 0) == 0) step = std::stoll(w.substr(5));
    }
    report_steps[gen].push_back(step);
  }
  CHECK_FALSE(report_steps.empty());
  for (const auto& [gen, at] : report_steps)
    for (size_t i = 1; i < at.size(); ++i) {
      INFO("generation " << gen << ": reports at boundaries " << at[i - 1] << " and " << at[i]);
      CHECK(at[i] - at[i - 1] >= steps + 1);
    }
  CHECK(count_of(r.err, "event=evict") == 0);
  check_exactly_once(r.err, 3, 720);
}

TEST_CASE("edl-run elastic: --evict-stragglers removes a slowed worker, its slot cools down and rejoins",
          "[launcher][straggler]") {
  auto r = run_edl({"--hostname", "t", "--min-np", "2", "--max-np", "3", "-np", "3", "--straggler-steps", "5",
                    "--straggler-factor", "3", "--evict-stragglers", "--blacklist-cooldown-range", "1,1", kWorker,
                    "--steps", "100000", "--step-ms", "10", "--params", "1024", "--records", "1200", "--slow-worker",
                    "t:2.0", "--slow-ms", "40"},
                   120s);
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.err.find("action=evict") != std::string::npos);
  CHECK(r.err.find("event=generation gen=2 size=2 left=t:2.0") != std::string::npos);
  CHECK(r.err.find("event=failed slot=2 worker=t:2.0") != std::string::npos);  // counted as a failure
  CHECK(r.err.find("cooldown_ms=1000") != std::string::npos);
  CHECK(r.err.find("worker=t:2.1") != std::string::npos);                      // restarted after the cooldown
  auto done = done_lines(r.err);
  CHECK(done.count("t:2.0") == 0);  // the straggler did not finish
  check_exactly_once(r.err, 2, 1200);
}

TEST_CASE("edl-run elastic: --rebalance-stragglers moves records away from a slowed worker, every record once",
          "[launcher][straggler]") {
  // The slowed worker's step takes 40 ms more whatever its records: the rebalancer gives it fewer
  // (the job's shard generator logs each new split); the data audit still counts every record once.
  auto r = run_edl({"--hostname", "t", "--min-np", "2", "--max-np", "3", "-np", "3", "--rebalance-stragglers", kWorker,
                    "--steps", "100000", "--step-ms", "10", "--params", "1024", "--records", "720", "--slow-worker",
                    "t:2.0", "--slow-ms", "40"},
                   120s);
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.err.find("edl data: rebalanced at step") != std::string::npos);
  check_exactly_once(r.err, 3, 720);
}

TEST_CASE("edl-run elastic: --autoscale follows the scripted throughput, out to a probe and back in",
          "[launcher][autoscale]") {
  // Steps take 40 ms at 1 worker, 20 ms at 2 and 120 ms at 3: R_2 = 4 R_1 (s_{1,1} = 3 > 0.7), R_3 =
  // R_2 / 4 (s_{2,1} = -1.5): probe 2, probe 3, back to 2 — wide margins for a loaded machine.
  auto r = run_edl({"--hostname", "t", "--min-np", "1", "--max-np", "3", "-np", "1", "--autoscale",
                    "--scaling-interval", "10", "--grace-period", "5", kWorker, "--steps", "300", "--step-ms", "40",
                    "--step-ms-by-size", "2:20,3:120", "--batch", "8", "--params", "1024"},
                   120s);
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.err.find("event=autoscale recommended=2 current=1") != std::string::npos);
  CHECK(r.err.find("event=scale-up slots=2") != std::string::npos);
  CHECK(r.err.find("event=autoscale recommended=3 current=2") != std::string::npos);
  CHECK(r.err.find("event=scale-up slots=3") != std::string::npos);
  CHECK(r.err.find("event=autoscale recommended=2 current=3") != std::string::npos);
  CHECK(r.err.find("event=scale-down slots=2") != std::string::npos);
  CHECK(r.err.find("event=generation gen=4 size=2 left=t:2.0") != std::string::npos);
  auto done = done_lines(r.err);
  CHECK(done.count("t:0.0") == 1);
  CHECK(done.count("t:1.0") == 1);
  CHECK(done["t:0.0"] == done["t:1.0"]);
}
