// Equivalence (issue 5, item 3): N workers with local batch b end with the same parameters as one
// worker with batch N*b after the same steps. Ranks are threads, each with its own Communicator
// over one shared memory store. Tolerances: float rounding (relative 1e-5, absolute 1e-6) for
// float32 on the wire; fp16 compression: absolute 2e-3 after 6 steps (11-bit mantissa, ~5e-4
// relative per gradient element, accumulated over the steps and amplified by Adam's normalisation).
#include <catch2/catch.hpp>

#include <array>
#include <atomic>
#include <cmath>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "edl/communicator.h"
#include "edl/error.h"
#include "edl/optim.h"
#include "edl/store.h"
#include "optim/rank_threads.h"
#include "optim/tiny_mlp.h"

using namespace edl;

namespace {

struct Config {
  OptimizerKind kind = OptimizerKind::kSGD;
  int ranks = 2;
  int local_batch = 8;
  int accumulation = 1;
  bool fuse = true;
  bool overlap = true;
  bool fp16 = false;
  size_t bucket_cap = 64 * sizeof(float);
};

constexpr int kDim = 6, kHidden = 12, kSteps = 6;

DistributedOptimizerOptions options_for(const Config& c) {
  DistributedOptimizerOptions o;
  o.optimizer.kind = c.kind;
  o.optimizer.momentum = 0.9;
  o.optimizer.nesterov = true;
  o.optimizer.weight_decay = 1e-3;
  o.scaling.base_lr = c.kind == OptimizerKind::kSGD ? 0.05 : 0.01;
  o.scaling.lr_scaling = optim::LrScaling::kNone;  // same LR for both runs: we compare the math
  o.fuse = c.fuse;
  o.overlap = c.overlap;
  o.fp16_compression = c.fp16;
  o.bucket_cap_bytes = c.bucket_cap;
  o.accumulation_steps = c.accumulation;
  return o;
}

// One worker, batch ranks * local_batch, no accumulation.
test::TinyMlp train_single(const Config& c, const test::Dataset& data) {
  test::TinyMlp m(kDim, kHidden);
  auto o = options_for(c);
  o.local = true;
  o.accumulation_steps = 1;
  o.fp16_compression = false;
  DistributedOptimizer opt(o);
  for (auto& p : m.parameters()) opt.add_parameter("p", p.data, p.grad, p.count);
  const int global = c.ranks * c.local_batch;
  for (int s = 0; s < kSteps; ++s) {
    m.backward(data, static_cast<size_t>(s) * global, global, [&](size_t i) { opt.grad_ready(i); });
    opt.step();
  }
  return m;
}

std::vector<test::TinyMlp> train_distributed(const Config& c, const test::Dataset& data, const std::string& prefix) {
  std::vector<test::TinyMlp> models(c.ranks, test::TinyMlp(kDim, kHidden));
  test::run_rank_threads(c.ranks, prefix, std::chrono::milliseconds(20000), [&](int r, std::shared_ptr<Communicator> comm) {
    auto o = options_for(c);
    o.comm = comm;
    DistributedOptimizer opt(o);
    test::TinyMlp& m = models[r];
    for (auto& p : m.parameters()) opt.add_parameter("p", p.data, p.grad, p.count);
    const int global = c.ranks * c.local_batch;
    const int micro = c.local_batch / c.accumulation;
    for (int s = 0; s < kSteps; ++s) {
      for (int pass = 0; pass < c.accumulation; ++pass) {
        size_t begin = static_cast<size_t>(s) * global + static_cast<size_t>(r) * c.local_batch + pass * micro;
        m.backward(data, begin, micro, [&](size_t i) { opt.grad_ready(i); });
      }
      opt.step();
    }
  });
  return models;
}

void check_close(const std::vector<float>& a, const std::vector<float>& b, double rel, double abs) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Catch::Detail::Approx(b[i]).epsilon(rel).margin(abs));
}

void check_equivalent(const Config& c, const std::string& name) {
  const auto data = test::make_dataset(c.ranks * c.local_batch * kSteps, kDim);
  test::TinyMlp ref = train_single(c, data);
  auto models = train_distributed(c, data, "eq/" + name + "/");
  const double rel = c.fp16 ? 0 : 1e-5, abs = c.fp16 ? 2e-3 : 1e-6;
  for (auto& m : models) {
    check_close(m.w1, ref.w1, rel, abs);
    check_close(m.b1, ref.b1, rel, abs);
    check_close(m.w2, ref.w2, rel, abs);
    check_close(m.b2, ref.b2, rel, abs);
  }
  // Every rank holds exactly the same parameters (same reduced gradients, same update).
  for (size_t r = 1; r < models.size(); ++r) CHECK(models[r].w1 == models[0].w1);
  // Training moved the parameters (the comparison is not vacuous).
  test::TinyMlp init(kDim, kHidden);
  double moved = 0;
  for (size_t i = 0; i < init.w1.size(); ++i) moved += std::fabs(init.w1[i] - ref.w1[i]);
  CHECK(moved > 1e-2);
}

}  // namespace

TEST_CASE("equivalence: N workers x batch b == 1 worker x batch N*b (SGD and Adam, fusion, accumulation)") {
  for (auto kind : {OptimizerKind::kSGD, OptimizerKind::kAdam}) {
    for (bool fuse : {true, false}) {
      for (int accumulation : {1, 2}) {
        Config c;
        c.kind = kind;
        c.fuse = fuse;
        c.accumulation = accumulation;
        std::string name = std::string(kind == OptimizerKind::kSGD ? "sgd" : "adam") + (fuse ? "-fused" : "-unfused") +
                           "-acc" + std::to_string(accumulation);
        SECTION(name) { check_equivalent(c, name); }
      }
    }
  }
}

TEST_CASE("equivalence: 3 ranks, no overlap, AdamW, one bucket for everything") {
  Config c;
  c.kind = OptimizerKind::kAdamW;
  c.ranks = 3;
  c.local_batch = 4;
  c.overlap = false;
  c.bucket_cap = 1 << 20;
  check_equivalent(c, "adamw3");
}

TEST_CASE("equivalence with fp16 compression (looser stated tolerance)") {
  for (auto kind : {OptimizerKind::kSGD, OptimizerKind::kAdam}) {
    Config c;
    c.kind = kind;
    c.fp16 = true;
    c.accumulation = 2;
    std::string name = kind == OptimizerKind::kSGD ? "sgd-fp16" : "adam-fp16";
    SECTION(name) { check_equivalent(c, name); }
  }
}

TEST_CASE("a failing peer surfaces as a CommError from step(), and the optimizer can go on with a new group") {
  auto store = make_memory_store();
  std::exception_ptr survivor_error;
  std::atomic<bool> survivor_recovered{false};
  std::thread peer([&] {
    CommunicatorOptions co;
    co.timeout = std::chrono::milliseconds(5000);
    auto comm = Communicator::create(store, "fail/g1/", 1, 2, co);
    comm->abort("peer leaves");  // dies before the first allreduce
  });
  std::thread survivor([&] {
    try {
      CommunicatorOptions co;
      co.timeout = std::chrono::milliseconds(5000);
      auto comm = Communicator::create(store, "fail/g1/", 0, 2, co);
      DistributedOptimizerOptions o;
      o.comm = comm;
      o.scaling.base_lr = 0.1;
      DistributedOptimizer opt(o);
      std::vector<float> w(16, 1.0f), g(16, 0.5f);
      opt.add_parameter("w", w.data(), g.data(), w.size());
      try {
        opt.step();
      } catch (const CommError&) {
        survivor_recovered = w[0] == 1.0f;  // nothing applied
      }
      // Next generation: alone (size 1 communicator).
      CommunicatorOptions co2;
      co2.generation = 2;
      opt.set_communicator(Communicator::create(store, "fail/g2/", 0, 1, co2));
      const bool resized = opt.rescaler().size() == 1;
      opt.step();
      survivor_recovered = survivor_recovered && resized && w[0] < 1.0f;
    } catch (...) {
      survivor_error = std::current_exception();
    }
  });
  peer.join();
  survivor.join();
  if (survivor_error) std::rethrow_exception(survivor_error);
  CHECK(survivor_recovered);
}

TEST_CASE("ranks that registered different parameter sizes get MismatchError from step(), not a hang") {
  auto store = make_memory_store();
  std::vector<int> outcome(2, 0);  // 1 = MismatchError, 2 = another error, 3 = no error
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        CommunicatorOptions co;
        co.timeout = std::chrono::milliseconds(10000);
        auto comm = Communicator::create(store, "mismatch/", r, 2, co);
        DistributedOptimizerOptions o;
        o.comm = comm;
        DistributedOptimizer opt(o);
        std::vector<float> w(r == 0 ? 10 : 12, 1.0f), g(w.size(), 0.1f);
        opt.add_parameter("w", w.data(), g.data(), w.size());
        opt.step();
        outcome[r] = 3;
      } catch (const MismatchError&) {
        outcome[r] = 1;
      } catch (...) {
        outcome[r] = 2;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(outcome[0] == 1);
  CHECK(outcome[1] == 1);
}

TEST_CASE("gradients reported in a different order on each rank still reduce bucket by bucket correctly") {
  auto store = make_memory_store();
  const size_t kParams = 6, kCount = 40;
  std::vector<std::vector<float>> result(2);
  std::vector<double> hidden_no_overlap(2, -1);
  std::vector<std::exception_ptr> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto comm = Communicator::create(store, "order/", r, 2);
        DistributedOptimizerOptions o;
        o.comm = comm;
        o.optimizer.momentum = 0;
        o.scaling.base_lr = 1.0;
        o.scaling.lr_scaling = optim::LrScaling::kNone;
        o.bucket_cap_bytes = 2 * kCount * sizeof(float);  // 3 buckets of 2 parameters
        DistributedOptimizer opt(o);
        std::vector<float> w(kParams * kCount, 0.0f), g(kParams * kCount);
        for (size_t p = 0; p < kParams; ++p) opt.add_parameter("p", &w[p * kCount], &g[p * kCount], kCount);
        for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>((r + 1) * (i % 13));
        for (size_t k = 0; k < kParams; ++k) opt.grad_ready(r == 0 ? kParams - 1 - k : k);  // opposite orders
        opt.step();
        result[r] = w;
        // Without overlap no communication can run before backward ends.
        DistributedOptimizerOptions o2 = o;
        o2.overlap = false;
        DistributedOptimizer late(o2);
        for (size_t p = 0; p < kParams; ++p) late.add_parameter("p", &w[p * kCount], &g[p * kCount], kCount);
        for (size_t k = 0; k < kParams; ++k) late.grad_ready(k);
        late.step();
        hidden_no_overlap[r] = late.last_step_stats().overlap_fraction();
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  for (int r = 0; r < 2; ++r) {
    REQUIRE(result[r].size() == kParams * kCount);
    for (size_t i = 0; i < result[r].size(); ++i) CHECK(result[r][i] == -1.5f * static_cast<float>(i % 13));
    CHECK(hidden_no_overlap[r] == 0.0);
  }
}

TEST_CASE("ranks with diverging accumulation steps or learning rates fail with MismatchError naming it") {
  for (int variant = 0; variant < 3; ++variant) {
    auto store = make_memory_store();
    std::vector<std::string> what(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        try {
          CommunicatorOptions co;
          co.timeout = std::chrono::milliseconds(10000);
          auto comm = Communicator::create(store, "diverge/" + std::to_string(variant) + "/", r, 2, co);
          DistributedOptimizerOptions o;
          o.comm = comm;
          o.fp16_compression = variant == 2;
          if (variant == 0 && r == 1) o.accumulation_steps = 2;
          if (variant >= 1 && r == 1) o.scaling.base_lr = 0.2;
          DistributedOptimizer opt(o);
          std::vector<float> w(8, 1.0f), g(8, 0.5f);
          opt.add_parameter("w", w.data(), g.data(), w.size());
          for (int pass = 0; pass < opt.accumulation_steps() - 1; ++pass) opt.backward_done();
          opt.step();
          what[r] = "no error";
        } catch (const MismatchError& e) {
          what[r] = e.what();
        } catch (const std::exception& e) {
          what[r] = std::string("other: ") + e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < 2; ++r) {
      INFO("variant " << variant << " rank " << r << ": " << what[r]);
      CHECK_THAT(what[r], Catch::Contains(variant == 0 ? "accumulation passes" : "learning rate"));
    }
  }
}

// --- weighted mean (set_step_samples): ranks with unequal, sometimes empty batches ---------------

namespace {

// Records of rank r at step s (some ranks get none at some steps, as at a shard's or epoch's tail).
int weighted_batch(int r, int s) {
  static const std::array<std::array<int, kSteps>, 3> sizes{{{5, 1, 4, 0, 6, 2}, {2, 2, 0, 0, 3, 5}, {0, 7, 1, 0, 2, 1}}};
  return sizes.at(r).at(s);
}

int records_before(int ranks, int s) {  // records of every rank in steps 0..s-1
  int n = 0;
  for (int t = 0; t < s; ++t)
    for (int r = 0; r < ranks; ++r) n += weighted_batch(r, t);
  return n;
}

std::vector<int> step_offsets(int ranks, int s) {  // first record of each rank at step s, then the end
  std::vector<int> off{records_before(ranks, s)};
  for (int r = 0; r < ranks; ++r) off.push_back(off.back() + weighted_batch(r, s));
  return off;
}

std::vector<test::TinyMlp> train_weighted(const Config& c, const test::Dataset& data, const std::string& prefix,
                                          bool weighted_on_rank0_only = false) {
  std::vector<test::TinyMlp> models(c.ranks, test::TinyMlp(kDim, kHidden));
  test::run_rank_threads(c.ranks, prefix, std::chrono::milliseconds(20000), [&](int r, std::shared_ptr<Communicator> comm) {
    auto o = options_for(c);
    o.comm = comm;
    DistributedOptimizer opt(o);
    test::TinyMlp& m = models[r];
    for (auto& p : m.parameters()) opt.add_parameter("p", p.data, p.grad, p.count);
    for (int s = 0; s < kSteps; ++s) {
      auto off = step_offsets(c.ranks, s);
      if (!weighted_on_rank0_only || r == 0) opt.set_step_samples(static_cast<uint64_t>(off[r + 1] - off[r]));
      m.backward(data, off[r], off[r + 1] - off[r], [&](size_t i) { opt.grad_ready(i); });
      opt.step();
    }
  });
  return models;
}

}  // namespace

TEST_CASE("weighted mean: ranks with unequal and empty batches == one worker over all the step's records") {
  for (bool fp16 : {false, true}) {
    for (auto kind : {OptimizerKind::kSGD, OptimizerKind::kAdam}) {
      Config c;
      c.kind = kind;
      c.ranks = 3;
      c.fp16 = fp16;
      DYNAMIC_SECTION((kind == OptimizerKind::kSGD ? "sgd" : "adam") << (fp16 ? "-fp16" : "")) {
        const auto data = test::make_dataset(records_before(3, kSteps), kDim);
        test::TinyMlp ref(kDim, kHidden);
        auto o = options_for(c);
        o.local = true;
        o.fp16_compression = false;
        DistributedOptimizer opt(o);
        for (auto& p : ref.parameters()) opt.add_parameter("p", p.data, p.grad, p.count);
        test::TinyMlp before = ref;
        for (int s = 0; s < kSteps; ++s) {
          auto off = step_offsets(3, s);
          opt.set_step_samples(static_cast<uint64_t>(off[3] - off[0]));
          ref.backward(data, off[0], off[3] - off[0], [&](size_t i) { opt.grad_ready(i); });
          opt.step();
          if (s == 3) {  // no rank had a record: nothing moved, the step still counts
            CHECK(opt.last_step_stats().samples == 0);
          }
        }
        CHECK(opt.step_count() == kSteps);
        auto models = train_weighted(c, data, std::string("w/") + (fp16 ? "h" : "f") + std::to_string(int(kind)) + "/");
        const double rel = fp16 ? 0 : 1e-5, abs = fp16 ? 2e-3 : 1e-6;
        for (auto& m : models) {
          check_close(m.w1, ref.w1, rel, abs);
          check_close(m.b2, ref.b2, rel, abs);
        }
        for (size_t r = 1; r < models.size(); ++r) CHECK(models[r].w1 == models[0].w1);
        // The plain mean over ranks would differ: the comparison is not vacuous.
        double moved = 0;
        for (size_t i = 0; i < before.w1.size(); ++i) moved += std::fabs(before.w1[i] - ref.w1[i]);
        CHECK(moved > 1e-2);
      }
    }
  }
}

TEST_CASE("weighted mean: an all-empty step changes nothing, and a rank that does not weight is a MismatchError") {
  DistributedOptimizerOptions o;
  o.local = true;
  o.scaling.base_lr = 0.1;
  DistributedOptimizer opt(o);
  std::vector<float> w(4, 1.0f), g(4, 0.0f);
  opt.add_parameter("w", w.data(), g.data(), w.size());
  g.assign(4, 1.0f);
  opt.step();  // momentum now non-zero
  std::vector<float> after_first = w;
  g.assign(4, 0.0f);
  opt.set_step_samples(0);
  opt.step();
  CHECK(w == after_first);  // a plain step with zero gradient would still move by momentum
  CHECK(opt.step_count() == 2);

  Config c;
  c.ranks = 3;
  const auto data = test::make_dataset(records_before(3, kSteps), kDim);
  CHECK_THROWS_AS(train_weighted(c, data, "wmis/", /*weighted_on_rank0_only=*/true), MismatchError);
}

TEST_CASE("set_step_samples after the step's first bucket was launched is a usage error") {
  DistributedOptimizerOptions o;
  o.local = true;
  DistributedOptimizer opt(o);
  std::vector<float> w(4, 1.0f), g(4, 0.0f);
  opt.add_parameter("w", w.data(), g.data(), w.size());
  opt.grad_ready(0);  // the only parameter: the pass ends and its bucket is launched
  CHECK_THROWS_AS(opt.set_step_samples(3), InvalidArgument);
  opt.step();
}
