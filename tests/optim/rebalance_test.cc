// Straggler rebalancing with the optimizer (docs/data.md, "Straggler rebalancing"): 3 ranks (threads,
// each with its own Communicator, DistributedOptimizer and ShardGenerator over one memory store), one
// of them twice as slow per record, get rebalanced batches; every record of the epoch is trained once
// and the weighted mean makes the parameters those of one process that trains each step's records,
// all ranks' together, as one batch.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "edl/data.h"
#include "edl/optim.h"
#include "optim/rank_threads.h"
#include "optim/tiny_mlp.h"

using namespace edl;

namespace {

constexpr int kDim = 4, kHidden = 8, kRanks = 3;
constexpr uint64_t kRecords = 480;

// The records `rows` of `d` as a dataset of their own (TinyMlp trains ranges of a dataset).
test::Dataset rows_of(const test::Dataset& d, const std::vector<uint64_t>& rows) {
  test::Dataset out;
  out.dim = d.dim;
  for (uint64_t r : rows) {
    out.x.insert(out.x.end(), d.x.begin() + r * d.dim, d.x.begin() + (r + 1) * d.dim);
    out.y.push_back(d.y[r]);
  }
  return out;
}

DistributedOptimizerOptions sgd() {
  DistributedOptimizerOptions o;
  o.optimizer.momentum = 0.9;
  o.scaling.base_lr = 0.05;
  o.scaling.lr_scaling = optim::LrScaling::kNone;
  return o;
}

}  // namespace

TEST_CASE("rebalancing: every record once, and the weighted mean equals one process training each step's records",
          "[optim][rebalance]") {
  const test::Dataset data = test::make_dataset(kRecords, kDim);
  const double per_record_s[kRanks] = {0.001, 0.001, 0.002};
  auto store = make_memory_store();
  std::mutex mu;
  std::map<int64_t, std::vector<std::vector<uint64_t>>> steps;  // step -> records of each rank
  std::vector<std::vector<float>> final_w1(kRanks);
  std::vector<std::vector<uint64_t>> final_split(kRanks);
  test::run_rank_threads(kRanks, "rebal/", std::chrono::milliseconds(20000), [&](int r, std::shared_ptr<Communicator> comm) {
    data::ShardOptions so;
    so.records = kRecords;
    so.records_per_shard = 40;
    so.batch_size = 8;
    so.seed = 3;
    so.epochs = 1;
    so.rebalance = true;
    so.worker_id = "w" + std::to_string(r);
    data::ShardGenerator shards(store, so);
    elastic::GenerationInfo info;
    info.generation = 1;
    info.rank = r;
    info.size = kRanks;
    shards.on_generation(info);
    test::TinyMlp m(kDim, kHidden);
    auto o = sgd();
    o.comm = comm;
    DistributedOptimizer opt(o);
    for (auto& p : m.parameters()) opt.add_parameter("p", p.data, p.grad, p.count);
    for (;;) {
      data::StepRecords s = shards.next();
      if (s.end_of_data) break;
      {
        std::lock_guard<std::mutex> lock(mu);
        auto& step = steps[s.step];
        step.resize(kRanks);
        step[r] = s.records;
      }
      const uint64_t n = s.records.size();
      opt.set_step_samples(n);
      if (n > 0) {
        const test::Dataset mine = rows_of(data, s.records);
        m.backward(mine, 0, n, [&](size_t i) { opt.grad_ready(i); });
      } else {
        opt.backward_done();  // TinyMlp's gradients are overwritten per pass: zero them for an empty step
      }
      opt.step();
      // What the elastic runtime's batch-boundary agreement gathers: every rank's records and compute.
      std::vector<int64_t> counts(kRanks, 0);
      counts[r] = static_cast<int64_t>(n);
      comm->allreduce(counts.data(), counts.size(), DataType::kInt64, ReduceOp::kSum);
      std::vector<uint64_t> records(counts.begin(), counts.end());
      std::vector<double> compute(kRanks);
      for (int q = 0; q < kRanks; ++q) compute[q] = static_cast<double>(records[q]) * per_record_s[q];
      shards.observe_step(compute, records);
    }
    final_w1[r] = m.w1;
    final_split[r] = shards.rebalanced_batches();
  });
  // Rebalanced: the slow rank ended with fewer records per step, the global batch stayed 24.
  REQUIRE(final_split[0].size() == kRanks);
  for (int r = 1; r < kRanks; ++r) CHECK(final_split[r] == final_split[0]);
  CHECK(final_split[0][2] < final_split[0][0]);
  CHECK(final_split[0][0] + final_split[0][1] + final_split[0][2] == 24);
  // Every record once.
  std::multiset<uint64_t> seen;
  for (const auto& [step, ranks] : steps)
    for (const auto& recs : ranks) seen.insert(recs.begin(), recs.end());
  CHECK(seen.size() == kRecords);
  for (uint64_t i = 0; i < kRecords; ++i) CHECK(seen.count(i) == 1);
  // One process, each step's records of all ranks as one batch.
  test::TinyMlp ref(kDim, kHidden);
  auto o = sgd();
  o.local = true;
  DistributedOptimizer opt(o);
  for (auto& p : ref.parameters()) opt.add_parameter("p", p.data, p.grad, p.count);
  for (const auto& [step, ranks] : steps) {
    std::vector<uint64_t> all;
    for (const auto& recs : ranks) all.insert(all.end(), recs.begin(), recs.end());
    opt.set_step_samples(all.size());
    if (all.empty()) {
      opt.backward_done();
    } else {
      const test::Dataset batch = rows_of(data, all);
      ref.backward(batch, 0, all.size(), [&](size_t i) { opt.grad_ready(i); });
    }
    opt.step();
  }
  for (int r = 0; r < kRanks; ++r) {
    REQUIRE(final_w1[r].size() == ref.w1.size());
    for (size_t i = 0; i < ref.w1.size(); ++i) CHECK(final_w1[r][i] == Approx(ref.w1[i]).epsilon(1e-5).margin(1e-6));
  }
  test::TinyMlp init(kDim, kHidden);
  double moved = 0;
  for (size_t i = 0; i < init.w1.size(); ++i) moved += std::fabs(init.w1[i] - ref.w1[i]);
  CHECK(moved > 1e-2);
}
