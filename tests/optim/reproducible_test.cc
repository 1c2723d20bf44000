// Reproducible mode of the DistributedOptimizer (docs/optim.md, "Reproducible mode"): the exact sum of
// micro-batch gradients does not depend on their order or on how they are split over the ranks, so
// 1, 2 and 3 ranks (threads, each with its own Communicator) end with bitwise identical parameters and
// buffers, SGD and Adam alike; ranks that disagree on the learning rate get MismatchError.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "edl/error.h"
#include "edl/optim.h"
#include "optim/exact_sum.h"
#include "optim/rank_threads.h"
#include "optim/tiny_mlp.h"

using namespace edl;
using optim::detail::ExactSum;

namespace {

// 12 micro-batch gradients over three tensors of very different magnitudes.
std::vector<std::vector<float>> random_gradients(size_t micro_batches, size_t elements, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<std::vector<float>> g(micro_batches, std::vector<float>(elements));
  for (auto& v : g)
    for (size_t i = 0; i < elements; ++i) v[i] = n(rng) * (i < 10 ? 1e-6f : i < 30 ? 3.0f : 1e3f);
  return g;
}

const std::vector<std::pair<size_t, size_t>> kTensors = {{0, 10}, {10, 20}, {30, 5}};

// The mean over the micro-batches, each group of them summed by its own ExactSum (a rank).
std::vector<float> grouped_mean(const std::vector<std::vector<float>>& g, const std::vector<uint64_t>& samples,
                                const std::vector<std::vector<size_t>>& groups) {
  std::vector<ExactSum> ranks(groups.size());
  std::vector<double> max(kTensors.size(), 0.0), mine(kTensors.size());
  for (size_t r = 0; r < groups.size(); ++r) {
    ranks[r].set_layout(kTensors, 35);
    for (size_t j : groups[r]) std::memcpy(ranks[r].add(samples[j]), g[j].data(), 35 * sizeof(float));
    ranks[r].local_max(mine.data());
    for (size_t t = 0; t < max.size(); ++t) max[t] = std::max(max[t], mine[t]);
  }
  std::vector<int64_t> sum(35, 0), part(35);
  uint64_t records = 0;
  for (auto& r : ranks) {
    r.quantize(max.data(), part.data());
    for (size_t i = 0; i < 35; ++i) sum[i] += part[i];
    records += r.samples();
  }
  std::vector<float> out(35);
  ranks[0].mean(sum.data(), max.data(), records, out.data());
  return out;
}

}  // namespace

TEST_CASE("ExactSum: any order and any split of the micro-batches over ranks gives the same bits") {
  const auto g = random_gradients(12, 35, 7);
  std::vector<uint64_t> samples = {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 3, 1};
  std::vector<size_t> all(12);
  for (size_t j = 0; j < 12; ++j) all[j] = j;
  const std::vector<float> ref = grouped_mean(g, samples, {all});
  // Close to the exact weighted mean (the grid keeps 2^-42 of each tensor's largest contribution).
  uint64_t total = 0;
  for (auto s : samples) total += s;
  for (size_t i = 0; i < 35; ++i) {
    double exact = 0;
    for (size_t j = 0; j < 12; ++j) exact += static_cast<double>(g[j][i]) * static_cast<double>(samples[j]);
    exact /= static_cast<double>(total);
    CHECK(ref[i] == Approx(exact).epsilon(1e-6).margin(1e-12));
  }
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<size_t> order = all;
    std::shuffle(order.begin(), order.end(), rng);
    const size_t n = 1 + trial % 5;
    std::vector<std::vector<size_t>> groups(n);
    for (size_t j = 0; j < 12; ++j) groups[rng() % n].push_back(order[j]);  // some ranks may get none
    CHECK(grouped_mean(g, samples, groups) == ref);
  }
}

TEST_CASE("ExactSum: a non-finite gradient gives a NaN mean for its tensor only, zeros stay zeros") {
  auto g = random_gradients(3, 35, 9);
  for (size_t i = 10; i < 30; ++i) g[0][i] = 0.0f, g[1][i] = 0.0f, g[2][i] = 0.0f;
  g[1][31] = std::numeric_limits<float>::quiet_NaN();
  const auto m = grouped_mean(g, {2, 2, 2}, {{0, 2}, {1}});
  for (size_t i = 0; i < 10; ++i) CHECK(std::isfinite(m[i]));
  for (size_t i = 10; i < 30; ++i) CHECK(m[i] == 0.0f);
  for (size_t i = 30; i < 35; ++i) CHECK(std::isnan(m[i]));
}

namespace {

constexpr int kDim = 5, kHidden = 9, kSteps = 7, kMicro = 3, kMicroBatches = 7;

DistributedOptimizerOptions det_options(OptimizerKind kind) {
  DistributedOptimizerOptions o;
  o.optimizer.kind = kind;
  o.optimizer.momentum = 0.9;
  o.optimizer.weight_decay = 1e-3;
  o.scaling.base_lr = kind == OptimizerKind::kSGD ? 0.05 : 0.01;
  o.scaling.base_size = 1;
  o.scaling.lr_scaling = optim::LrScaling::kLinear;  // would change the LR with the size: not in this mode
  o.scaling.schedule = [](int64_t, int64_t step) { return 0.05 / (1.0 + 0.1 * static_cast<double>(step)); };
  o.bucket_cap_bytes = 16 * sizeof(float);  // several buckets
  o.deterministic = true;
  return o;
}

struct Trained {
  std::vector<float> params, buffer;
};

// kSteps steps of kMicroBatches micro-batches of kMicro records; rank r of `ranks` trains the micro-batches
// j with (j + step) % ranks == r (a different split every step), in reverse order on odd ranks. The last
// step's last micro-batch has a single record and one micro-batch is empty. A "buffer" (like batch-norm
// statistics) moves towards each micro-batch's mean target: 0.9 b + 0.1 mean(y).
Trained train(int ranks, OptimizerKind kind, const std::string& prefix) {
  const auto data = test::make_dataset(kSteps * kMicroBatches * kMicro, kDim);
  std::vector<Trained> out(ranks);
  test::run_rank_threads(ranks, prefix, std::chrono::milliseconds(20000), [&](int r, std::shared_ptr<Communicator> comm) {
    test::TinyMlp m(kDim, kHidden);
    auto o = det_options(kind);
    o.comm = comm;
    DistributedOptimizer opt(o);
    for (auto& p : m.parameters()) opt.add_parameter("p" + std::to_string(p.count), p.data, p.grad, p.count);
    std::vector<float> buffer(3, 0.5f);
    opt.add_buffer("bn", buffer.data(), buffer.size());
    for (int s = 0; s < kSteps; ++s) {
      std::vector<int> mine;
      for (int j = 0; j < kMicroBatches; ++j)
        if ((j + s) % ranks == r) mine.push_back(j);
      if (r % 2 == 1) std::reverse(mine.begin(), mine.end());
      for (int j : mine) {
        size_t begin = static_cast<size_t>((s * kMicroBatches + j) * kMicro), n = kMicro;
        if (s == kSteps - 1 && j == kMicroBatches - 1) n = 1;
        if (s == 2 && j == 4) n = 0;
        opt.begin_micro_batch(n);
        if (n == 0) continue;  // an empty micro-batch contributes nothing
        double mean_y = 0;
        for (size_t i = begin; i < begin + n; ++i) mean_y += data.y[i] / static_cast<double>(n);
        for (size_t k = 0; k < buffer.size(); ++k) buffer[k] = 0.9f * buffer[k] + 0.1f * static_cast<float>(mean_y * (k + 1));
        m.backward(data, begin, n, [&](size_t i) { opt.grad_ready(i); });
      }
      opt.step();
    }
    for (auto& p : m.parameters()) out[r].params.insert(out[r].params.end(), p.data, p.data + p.count);
    out[r].buffer = buffer;
  });
  for (int r = 1; r < ranks; ++r) {
    CHECK(out[r].params == out[0].params);
    CHECK(out[r].buffer == out[0].buffer);
  }
  return out[0];
}

}  // namespace

TEST_CASE("reproducible mode: 1, 2 and 3 ranks end with bitwise identical parameters and buffers (SGD, Adam)") {
  for (auto kind : {OptimizerKind::kSGD, OptimizerKind::kAdam}) {
    DYNAMIC_SECTION((kind == OptimizerKind::kSGD ? "sgd" : "adam")) {
      const std::string tag = kind == OptimizerKind::kSGD ? "s" : "a";
      const Trained one = train(1, kind, "det1" + tag + "/");
      const Trained two = train(2, kind, "det2" + tag + "/");
      const Trained three = train(3, kind, "det3" + tag + "/");
      CHECK(two.params == one.params);
      CHECK(three.params == one.params);
      CHECK(two.buffer == one.buffer);
      CHECK(three.buffer == one.buffer);
      test::TinyMlp init(kDim, kHidden);
      double moved = 0;
      for (size_t i = 0; i < init.w1.size(); ++i) moved += std::fabs(init.w1[i] - one.params[i]);
      CHECK(moved > 1e-3);  // training moved the parameters: the comparison is not vacuous
      CHECK(one.buffer[0] != 0.5f);
    }
  }
}

TEST_CASE("reproducible mode: the world-of-one result is the exact weighted mean, not the plain float sum") {
  // One step, two micro-batches of 2 and 1 records: the update uses (2 g_a + 1 g_b) / 3.
  DistributedOptimizerOptions o;
  o.local = true;
  o.deterministic = true;
  o.optimizer.momentum = 0;
  o.scaling.base_lr = 1.0;
  DistributedOptimizer opt(o);
  std::vector<float> w(2, 0.0f), g(2);
  opt.add_parameter("w", w.data(), g.data(), 2);
  opt.begin_micro_batch(2);
  g = {3.0f, -1.0f};
  opt.backward_done();
  opt.begin_micro_batch(1);
  g = {0.0f, 2.0f};
  opt.step();  // ends the second pass
  CHECK(w[0] == Approx(-2.0));
  CHECK(w[1] == Approx(0.0).margin(1e-12));
  CHECK(opt.last_step_stats().samples == 3);
  opt.step();  // no micro-batch at all: nothing moves
  CHECK(w[0] == Approx(-2.0));
}

TEST_CASE("reproducible mode: misuse is a clear error, ranks with different learning rates get MismatchError") {
  DistributedOptimizerOptions o;
  o.local = true;
  o.deterministic = true;
  DistributedOptimizer opt(o);
  std::vector<float> w(2, 0.0f), g(2, 1.0f);
  opt.add_parameter("w", w.data(), g.data(), 2);
  CHECK_THROWS_AS(opt.backward_done(), InvalidArgument);  // a pass without begin_micro_batch
  opt.discard_step();

  DistributedOptimizerOptions plain;
  plain.local = true;
  DistributedOptimizer normal(plain);
  normal.add_parameter("w", w.data(), g.data(), 2);
  CHECK_THROWS_AS(normal.begin_micro_batch(1), InvalidArgument);

  DistributedOptimizerOptions f16 = o;
  f16.fp16_compression = true;
  CHECK_THROWS_AS(DistributedOptimizer(f16), InvalidArgument);

  CHECK_THROWS_AS(test::run_rank_threads(2, "detlr/", std::chrono::milliseconds(20000),
                                         [&](int r, std::shared_ptr<Communicator> comm) {
                                           auto oo = det_options(OptimizerKind::kSGD);
                                           oo.scaling.schedule = nullptr;
                                           oo.scaling.base_lr = r == 0 ? 0.1 : 0.2;
                                           oo.comm = comm;
                                           DistributedOptimizer d(oo);
                                           std::vector<float> ww(4, 0.0f), gg(4, 1.0f);
                                           d.add_parameter("w", ww.data(), gg.data(), 4);
                                           d.begin_micro_batch(1);
                                           d.step();
                                         }),
                    MismatchError);
}
