// The cluster simulator's engine: event ordering, the two policies, utilisation accounting and
// preemption by the serving job, on hand-computed schedules.
#include <catch2/catch.hpp>

#include "cluster_sim.h"

namespace sim = edl::bench::sim;

namespace {

// Linear scaling, 0.5 s steps, no launch, no checkpoints unless a test sets them; shrinking to 3
// workers stalls 2 s and redoes 1 step, growing to 4 stalls 1 s.
sim::Costs simple_costs() {
  sim::Costs c;
  c.name = "test";
  c.curve = sim::ScalingCurve::fit({{1, 1.0}, {2, 2.0}, {4, 4.0}});
  c.pause.add("shrink", 3, {2.0, 1.0});
  c.pause.add("grow", 4, {1.0, 0.0});
  c.step_s = 0.5;
  c.launch_s = 0;
  c.checkpoint_every_s = 0;
  return c;
}

int max_allocated(const sim::SimResult& r) {
  int m = 0;
  for (const auto& s : r.timeline) {
    int used = s.serving;
    for (int g : s.gpus) used += g;
    m = std::max(m, used);
  }
  return m;
}

}  // namespace

TEST_CASE("event queue pops by time, then class, then insertion order", "[cluster_sim]") {
  sim::EventQueue q;
  q.push({5.0, sim::Event::kSubmit, 1});
  q.push({5.0, sim::Event::kFinish, 2});
  q.push({1.0, sim::Event::kSubmit, 3});
  q.push({5.0, sim::Event::kServing, 4});
  q.push({5.0, sim::Event::kFinish, 5});
  q.push({5.0, sim::Event::kPhaseEnd, 6});
  std::vector<int> order;
  while (!q.empty()) order.push_back(q.pop().job);
  CHECK(order == std::vector<int>{3, 2, 5, 6, 4, 1});
}

TEST_CASE("a job ending at the instant another is submitted hands its GPUs over at once", "[cluster_sim]") {
  sim::Scenario s;
  s.name = "t";
  s.gpus = 4;
  s.jobs.push_back({"a", 0, 4, 1, 40.0});   // 4 workers, linear: ends at exactly 10 s
  s.jobs.push_back({"b", 10, 4, 1, 20.0});  // submitted at 10 s
  sim::SimResult r = sim::simulate(s, simple_costs(), sim::Policy::kGang);
  CHECK(r.jobs[0].end_s == Approx(10.0));
  CHECK(r.jobs[1].start_s == Approx(10.0));
  CHECK(r.jobs[1].end_s == Approx(15.0));
  CHECK(r.utilization == Approx(1.0));
}

TEST_CASE("utilisation counts launch and stalls as idle", "[cluster_sim]") {
  sim::Scenario s;
  s.name = "t";
  s.gpus = 2;
  s.jobs.push_back({"a", 0, 1, 1, 10.0});
  sim::Costs c = simple_costs();
  SECTION("no launch: one of two GPUs busy the whole run") {
    sim::SimResult r = sim::simulate(s, c, sim::Policy::kGang);
    CHECK(r.makespan == Approx(10.0));
    CHECK(r.utilization == Approx(0.5));
    CHECK(r.contended_utilization == Approx(0.0));  // 1 GPU asked of 2: never full
  }
  SECTION("a 5 s launch holds the GPU without using it") {
    c.launch_s = 5;
    sim::SimResult r = sim::simulate(s, c, sim::Policy::kGang);
    CHECK(r.jobs[0].start_s == Approx(5.0));
    CHECK(r.makespan == Approx(15.0));
    CHECK(r.utilization == Approx(10.0 / 30.0));
    REQUIRE(r.timeline.size() >= 2);
    CHECK(r.timeline[0].gpus[0] == 1);
    CHECK_FALSE(r.timeline[0].busy[0]);
  }
}

TEST_CASE("gang waits for the whole gang, elastic starts on what is free and grows", "[cluster_sim]") {
  sim::Scenario s;
  s.name = "t";
  s.gpus = 6;
  s.jobs.push_back({"a", 0, 4, 1, 40.0});  // 10 s on 4 GPUs
  s.jobs.push_back({"b", 2, 4, 1, 40.0});
  sim::Costs c = simple_costs();
  sim::SimResult g = sim::simulate(s, c, sim::Policy::kGang);
  CHECK(g.jobs[1].start_s == Approx(10.0));
  CHECK(g.jobs[1].end_s == Approx(20.0));
  sim::SimResult e = sim::simulate(s, c, sim::Policy::kElastic);
  // b: 2 workers from 2 s to 10 s (16 units), grows to 4 with a 1 s stall, 24 units left at 4/s.
  CHECK(e.jobs[1].start_s == Approx(2.0));
  CHECK(e.jobs[1].resizes == 1);
  CHECK(e.jobs[1].end_s == Approx(10.0 + 1.0 + 6.0));
  CHECK(max_allocated(g) <= 6);
  CHECK(max_allocated(e) == 6);
  CHECK(e.utilization > g.utilization);
}

TEST_CASE("serving preempts: elastic shrinks and pays the pause, gang restarts from a checkpoint",
          "[cluster_sim]") {
  sim::Scenario s;
  s.name = "t";
  s.gpus = 4;
  s.jobs.push_back({"a", 0, 4, 1, 100.0});
  s.serving.steps = {{0, 0}, {10, 1}, {20, 0}};
  sim::Costs c = simple_costs();
  SECTION("elastic") {
    sim::SimResult r = sim::simulate(s, c, sim::Policy::kElastic);
    // 0-10 s: 40 units; shrink to 3 redoes 1 step of 4 workers (2 units), stalls to 12 s;
    // 12-20 s: 24 units (62); grow stalls to 21 s; 38 units left at 4/s -> 30.5 s.
    CHECK(r.jobs[0].end_s == Approx(30.5));
    CHECK(r.jobs[0].resizes == 2);
    CHECK(r.jobs[0].restarts == 0);
    CHECK(r.utilization == Approx((40.0 + 2.0 + 32.0 + 38.0) / (4 * 30.5)));
    CHECK(max_allocated(r) == 4);
  }
  SECTION("gang, checkpoint every 6 s") {
    c.checkpoint_every_s = 6;
    sim::SimResult r = sim::simulate(s, c, sim::Policy::kGang);
    // Killed at 10 s with its last checkpoint at 6 s (24 units); re-admitted at 20 s; 76 units at 4/s.
    CHECK(r.jobs[0].restarts == 1);
    CHECK(r.jobs[0].start_s == Approx(0.0));
    CHECK(r.jobs[0].end_s == Approx(39.0));
    CHECK(r.utilization == Approx((40.0 + 10.0 + 76.0) / (4 * 39.0)));
  }
  SECTION("elastic below min_workers is requeued like a gang job") {
    s.jobs[0].min_workers = 4;
    sim::SimResult r = sim::simulate(s, c, sim::Policy::kElastic);
    CHECK(r.jobs[0].restarts == 1);
    CHECK(r.jobs[0].end_s == Approx(20.0 + 100.0 / 4));  // no checkpoint: starts over at 20 s
  }
}

TEST_CASE("bad scenarios are rejected with the job named", "[cluster_sim]") {
  sim::Scenario s;
  s.name = "t";
  s.gpus = 2;
  s.jobs.push_back({"big", 0, 4, 1, 1.0});
  CHECK_THROWS_WITH(sim::simulate(s, simple_costs(), sim::Policy::kGang), Catch::Contains("'big' asks for 4 GPUs"));
  s.jobs[0] = {"empty", 0, 1, 1, 0.0};
  CHECK_THROWS_WITH(sim::simulate(s, simple_costs(), sim::Policy::kGang), Catch::Contains("'empty'"));
}

TEST_CASE("experiment 1 calibrated on the seed reproduces the published gang schedule", "[cluster_sim]") {
  sim::Costs seed = sim::seed_costs();
  sim::Scenario s = sim::experiment1(seed);
  sim::SimResult g = sim::simulate(s, seed, sim::Policy::kGang);
  CHECK(g.jobs[0].end_s == Approx(465.0));
  CHECK(g.jobs[1].start_s == Approx(518.0));
  CHECK(g.jobs[1].end_s == Approx(968.0));
  CHECK(g.contended_utilization == Approx(4.0 / 6.0));
  sim::SimResult e = sim::simulate(s, seed, sim::Policy::kElastic);
  CHECK(e.jobs[1].start_s == Approx(120.0 + seed.launch_s));
  CHECK(e.makespan < 968.0 * (1 - 0.164));  // at least the seed's margin (968 s -> 809 s)
  CHECK(e.utilization > g.utilization);
}

TEST_CASE("experiment 2: the elastic job tracks the serving curve, gang is killed by it", "[cluster_sim]") {
  sim::Costs seed = sim::seed_costs();
  sim::Scenario s = sim::experiment2(seed);
  sim::SimResult e = sim::simulate(s, seed, sim::Policy::kElastic);
  sim::SimResult g = sim::simulate(s, seed, sim::Policy::kGang);
  REQUIRE(e.jobs[0].end_s > 0);
  REQUIRE(g.jobs[0].end_s > 0);
  CHECK(e.jobs[0].end_s < g.jobs[0].end_s);
  CHECK(g.jobs[0].restarts > 0);
  CHECK(e.jobs[0].restarts == 0);
  CHECK(e.utilization > 0.9);
  for (const auto& x : e.timeline) {
    CHECK(x.serving == s.serving.at(x.t));
    if (x.t > seed.launch_s && x.t < e.makespan) CHECK(x.gpus[0] == std::min(6, 8 - x.serving));
  }
}
