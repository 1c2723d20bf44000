// ShardGenerator's reproducible mode (the fixed schedule of micro-batches) and straggler
// rebalancing (docs/data.md): a step's micro-batches do not depend on the world size; rebalanced
// batches follow the measured speeds and keep the global batch; both stay exactly once per epoch
// under random kills, joins and leaves (testing/shard_sim.h).
#include <catch2/catch.hpp>

#include <map>
#include <set>

#include "data/rebalance.h"
#include "edl/data.h"
#include "edl/error.h"
#include "testing/shard_sim.h"

using namespace edl::data;
using Catch::Matchers::Contains;

namespace {

ShardOptions fixed_opts(uint64_t records, uint64_t micro, uint64_t micro_batches) {
  ShardOptions o;
  o.records = records;
  o.records_per_shard = 23;
  o.batch_size = micro;
  o.seed = 5;
  o.epochs = 2;
  o.deterministic = true;
  o.micro_batches = micro_batches;
  return o;
}

edl::elastic::GenerationInfo gen(uint64_t g, int rank, int size) {
  edl::elastic::GenerationInfo info;
  info.generation = g;
  info.rank = rank;
  info.size = size;
  return info;
}

// Every step's micro-batches (index -> records) when `size` workers draw the whole run.
std::map<int64_t, std::map<uint64_t, std::vector<uint64_t>>> fixed_run(int size, int64_t* end_step) {
  auto store = edl::make_memory_store();
  std::vector<std::unique_ptr<ShardGenerator>> g;
  for (int r = 0; r < size; ++r) {
    g.push_back(std::make_unique<ShardGenerator>(store, fixed_opts(200, 4, 7)));
    g.back()->on_generation(gen(1, r, size));
  }
  std::map<int64_t, std::map<uint64_t, std::vector<uint64_t>>> steps;
  for (;;) {
    bool end = false;
    for (auto& w : g) {
      StepRecords s = w->next();
      end = s.end_of_data;
      *end_step = s.step;
      for (const MicroBatch& mb : s.micro_batches) {
        REQUIRE(steps[s.step].count(mb.index) == 0);  // no micro-batch trained twice in a step
        steps[s.step][mb.index].assign(s.records.begin() + mb.begin, s.records.begin() + mb.begin + mb.size);
      }
    }
    if (end) break;
  }
  return steps;
}

void check_audit(const edl::testing::SimResult& r, int epochs, uint64_t records) {
  INFO("kills " << r.kills << " joins " << r.joins << " leaves " << r.leaves << " steps " << r.steps);
  REQUIRE(r.error.empty());
  REQUIRE(r.epochs.size() == static_cast<size_t>(epochs));
  for (const auto& e : r.epochs) {
    INFO("epoch " << e.epoch);
    CHECK(e.trained_once == records);
    CHECK(e.trained_twice == 0);
    CHECK(e.never == 0);
  }
}

}  // namespace

TEST_CASE("reproducible mode: a step's micro-batches depend on (seed, epoch, step) only, not on the world size",
          "[data][shards][reproducible]") {
  int64_t end1 = 0;
  const auto one = fixed_run(1, &end1);
  CHECK(end1 == 2 * 8);  // 200 records, 28 per step: 8 steps per epoch (the last one 4 records)
  std::multiset<uint64_t> epoch0;
  for (const auto& [step, mbs] : one) {
    size_t n = 0;
    for (const auto& [index, recs] : mbs) {
      CHECK(index < 7);
      CHECK(recs.size() <= 4);
      n += recs.size();
      if (step < 8) epoch0.insert(recs.begin(), recs.end());
    }
    CHECK(n == (step % 8 == 7 ? 4u : 28u));
  }
  CHECK(epoch0.size() == 200);
  for (uint64_t r = 0; r < 200; ++r) CHECK(epoch0.count(r) == 1);
  for (int size : {2, 3, 5, 9}) {
    int64_t end = 0;
    INFO("world size " << size);
    CHECK(fixed_run(size, &end) == one);
    CHECK(end == end1);
  }
}

TEST_CASE("reproducible mode: a rollback replays the same micro-batches, snapshots must match the mode",
          "[data][shards][reproducible]") {
  auto store = edl::make_memory_store();
  ShardGenerator g(store, fixed_opts(200, 4, 7));
  g.on_generation(gen(1, 1, 3));
  for (int i = 0; i < 9; ++i) g.next();  // into the second epoch
  const std::string snap = g.save();
  CHECK_THAT(snap, Contains("fixed=4:7:8"));
  std::vector<StepRecords> first;
  for (int i = 0; i < 3; ++i) first.push_back(g.next());
  g.load(snap);
  g.on_generation(gen(2, 0, 2));  // a smaller world after a failure
  ShardGenerator other(store, fixed_opts(200, 4, 7));
  other.load(snap);
  other.on_generation(gen(2, 1, 2));
  for (int i = 0; i < 3; ++i) {
    StepRecords a = g.next(), b = other.next();
    CHECK(a.step == first[i].step);
    CHECK(a.epoch == 1);
    std::multiset<uint64_t> now(a.records.begin(), a.records.end()), before;
    now.insert(b.records.begin(), b.records.end());
    // the step's records are the same, split over 2 workers now instead of 3
    ShardGenerator three(store, fixed_opts(200, 4, 7));
    three.load(snap);
    for (int r = 0; r < 3; ++r) {
      three.load(snap);
      three.on_generation(gen(3, r, 3));
      for (int k = 0; k < i; ++k) three.next();
      StepRecords s = three.next();
      before.insert(s.records.begin(), s.records.end());
    }
    CHECK(now == before);
  }
  ShardGenerator plain(store, [] {
    auto o = fixed_opts(200, 4, 7);
    o.deterministic = false;
    return o;
  }());
  CHECK_THROWS_WITH(plain.load(snap), Contains("written in the reproducible mode"));
  CHECK_THROWS_WITH(g.load(plain.save()), Contains("without the reproducible mode"));
  ShardGenerator other_micro(store, fixed_opts(200, 5, 7));
  CHECK_THROWS_WITH(other_micro.load(snap), Contains("micro-batches of"));
  CHECK_THROWS_AS(ShardGenerator(store, fixed_opts(200, 4, 0)), edl::InvalidArgument);
  auto with_policy = fixed_opts(200, 4, 7);
  with_policy.batch_for_size = [](int) { return uint64_t{4}; };
  CHECK_THROWS_AS(ShardGenerator(store, with_policy), edl::InvalidArgument);
}

TEST_CASE("reproducible mode: exactly once per epoch under random kills, joins and leaves",
          "[data][shards][reproducible][elastic]") {
  for (uint64_t seed : {1, 2, 3}) {
    edl::testing::SimOptions o;
    o.seed = seed;
    o.records = 500 + 31 * seed;
    o.deterministic = true;
    o.micro_batches = 3 + seed;
    o.commit_every = 1 + static_cast<int>(seed % 3);
    edl::testing::Simulation sim(o);
    INFO("seed " << seed);
    check_audit(sim.run(), o.epochs, o.records);
  }
}

TEST_CASE("Rebalancer: the min-max split, the median, the hysteresis", "[data][rebalance]") {
  using edl::data::detail::Rebalancer;
  CHECK(Rebalancer::min_max_split(96, {0.002, 0.002, 0.004}) == std::vector<uint64_t>{39, 38, 19});
  CHECK(Rebalancer::min_max_split(5, {1.0, 1.0, 1.0}) == std::vector<uint64_t>{2, 2, 1});
  CHECK(Rebalancer::min_max_split(3, {1.0, 100.0, 1.0}) == std::vector<uint64_t>{1, 1, 1});  // one each first
  Rebalancer rb;
  rb.reset(3, 97);
  CHECK(rb.split() == std::vector<uint64_t>{33, 32, 32});
  for (int i = 0; i < 3; ++i) {
    rb.observe({0.033, 0.032, 0.064}, {33, 32, 32});
    CHECK_FALSE(rb.update());  // fewer than kMinSamples samples
  }
  rb.observe({0.033, 0.032, 0.064}, {33, 32, 32});
  rb.observe({0.033, 9.9, 0.064}, {33, 0, 32});  // a rank without records teaches nothing
  REQUIRE(rb.update());
  CHECK(rb.split() == std::vector<uint64_t>{39, 39, 19});
  for (int i = 0; i < 6; ++i) rb.observe({0.040, 0.039, 0.040}, {39, 39, 19});  // now balanced
  CHECK_FALSE(rb.update());
  rb.observe({0.1}, {1});  // another world size: ignored
  CHECK(rb.split() == std::vector<uint64_t>{39, 39, 19});
}

TEST_CASE("rebalancing: batches follow the speeds mid-epoch, the global batch stays, records stay exactly once",
          "[data][shards][rebalance]") {
  auto store = edl::make_memory_store();
  const double per_record[3] = {0.001, 0.001, 0.002};
  std::vector<std::unique_ptr<ShardGenerator>> g;
  for (int r = 0; r < 3; ++r) {
    ShardOptions o;
    o.records = 2000;
    o.records_per_shard = 100;
    o.batch_size = 16;
    o.seed = 2;
    o.epochs = 1;
    o.rebalance = true;
    o.worker_id = "w" + std::to_string(r);
    g.push_back(std::make_unique<ShardGenerator>(store, o));
    g.back()->on_generation(gen(1, r, 3));
  }
  CHECK(g[0]->rebalanced_batches() == std::vector<uint64_t>{16, 16, 16});
  std::multiset<uint64_t> seen;
  int64_t switched_at = -1;
  uint64_t max_after[3] = {0, 0, 0};
  for (;;) {
    std::vector<double> compute(3);
    std::vector<uint64_t> records(3);
    bool end = false;
    for (int r = 0; r < 3; ++r) {
      StepRecords s = g[r]->next();
      end = s.end_of_data;
      records[r] = s.records.size();
      compute[r] = static_cast<double>(records[r]) * per_record[r];
      seen.insert(s.records.begin(), s.records.end());
      if (switched_at >= 0) max_after[r] = std::max<uint64_t>(max_after[r], s.records.size());
    }
    if (end) break;
    if (switched_at < 0 && g[0]->rebalanced_batches() != std::vector<uint64_t>{16, 16, 16}) switched_at = g[0]->step();
    for (auto& w : g) {
      CHECK(w->rebalanced_batches() == g[0]->rebalanced_batches());  // every member the same split
      w->observe_step(compute, records);
    }
    if (g[0]->step() % 10 == 3) g[g[0]->step() % 3]->save();  // commits in between (one member's table)
  }
  REQUIRE(switched_at > 0);
  CHECK(switched_at <= 8);  // kMinSamples steps of measurements, then the switch
  const auto split = g[0]->rebalanced_batches();
  REQUIRE(split.size() == 3);
  CHECK(split[0] + split[1] + split[2] == 48);  // the global batch stays
  double slowest = 0;
  for (int r = 0; r < 3; ++r) slowest = std::max(slowest, static_cast<double>(split[r]) * per_record[r]);
  CHECK(slowest == Approx(0.020));  // the best possible: 48 records at 1, 1 and 0.5 records per ms
  CHECK(split[2] < split[0]);
  for (int r = 0; r < 3; ++r) CHECK(max_after[r] == split[r]);
  CHECK(seen.size() == 2000);
  for (uint64_t r = 0; r < 2000; ++r) CHECK(seen.count(r) == 1);
}

TEST_CASE("rebalancing: exactly once per epoch under random kills, joins and leaves, members of different speeds",
          "[data][shards][rebalance][elastic]") {
  for (uint64_t seed : {1, 2, 3, 4}) {
    edl::testing::SimOptions o;
    o.seed = seed;
    o.records = 700 + 41 * seed;
    o.records_per_shard = 25 + seed;
    o.rebalance = true;
    o.min_batch = 6;
    o.commit_every = 1 + static_cast<int>(seed % 3);
    edl::testing::Simulation sim(o);
    INFO("seed " << seed);
    check_audit(sim.run(), o.epochs, o.records);
  }
  for (uint64_t seed : {5, 6}) {  // the reproducible mode rebalances micro-batches
    edl::testing::SimOptions o;
    o.seed = seed;
    o.records = 400;
    o.rebalance = true;
    o.deterministic = true;
    o.micro_batches = 9;
    edl::testing::Simulation sim(o);
    INFO("seed " << seed);
    check_audit(sim.run(), o.epochs, o.records);
  }
}
