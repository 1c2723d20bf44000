// DistributedOptimizer in a world of one (local = true): the update rules against reference
// formulas, gradient accumulation, bucket layout, momentum compensation, snapshots and misuse.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "edl/error.h"
#include "edl/optim.h"
#include "optim/tiny_mlp.h"

using namespace edl;
using Approx = Catch::Detail::Approx;

namespace {

DistributedOptimizerOptions local_options(OptimizerKind kind, double lr) {
  DistributedOptimizerOptions o;
  o.local = true;
  o.optimizer.kind = kind;
  o.scaling.base_lr = lr;
  return o;
}

// Deterministic pseudo-gradient for step s, element i.
float grad_at(int s, size_t i) { return std::sin(0.37f * static_cast<float>(i) + 1.1f * static_cast<float>(s)); }

elastic::GenerationInfo gen(uint64_t id, int size) {
  elastic::GenerationInfo g;
  g.generation = id;
  g.size = size;
  return g;
}

}  // namespace

TEST_CASE("SGD with momentum, Nesterov and weight decay matches the reference recurrence") {
  for (bool nesterov : {false, true}) {
    DYNAMIC_SECTION("nesterov " << nesterov) {
      auto o = local_options(OptimizerKind::kSGD, 0.05);
      o.optimizer.momentum = 0.9;
      o.optimizer.nesterov = nesterov;
      o.optimizer.weight_decay = 0.01;
      DistributedOptimizer opt(o);
      const size_t n = 7;
      std::vector<float> w(n, 0.5f), g(n);
      opt.add_parameter("w", w.data(), g.data(), n);
      std::vector<double> rw(n, 0.5), rbuf(n, 0.0);  // PyTorch u-form: buf = mu buf + g; w -= lr (g + mu buf)
      for (int s = 0; s < 6; ++s) {
        for (size_t i = 0; i < n; ++i) g[i] = grad_at(s, i);
        opt.step();
        for (size_t i = 0; i < n; ++i) {
          double gi = grad_at(s, i) + 0.01 * rw[i];
          rbuf[i] = 0.9 * rbuf[i] + gi;
          rw[i] -= 0.05 * (nesterov ? gi + 0.9 * rbuf[i] : rbuf[i]);
        }
      }
      for (size_t i = 0; i < n; ++i) CHECK(w[i] == Approx(rw[i]).epsilon(1e-5));
      CHECK(opt.step_count() == 6);
    }
  }
}

TEST_CASE("plain SGD (momentum 0) is w -= lr * g") {
  auto o = local_options(OptimizerKind::kSGD, 0.5);
  o.optimizer.momentum = 0;
  DistributedOptimizer opt(o);
  std::vector<float> w{1, 2, 3}, g{0.5f, -1, 2};
  opt.add_parameter("w", w.data(), g.data(), 3);
  opt.step();
  CHECK(w[0] == Approx(0.75));
  CHECK(w[1] == Approx(2.5));
  CHECK(w[2] == Approx(2.0));
}

TEST_CASE("Adam and AdamW match the reference formulas") {
  for (auto kind : {OptimizerKind::kAdam, OptimizerKind::kAdamW}) {
    DYNAMIC_SECTION("kind " << static_cast<int>(kind)) {
      auto o = local_options(kind, 0.01);
      o.optimizer.weight_decay = 0.1;
      DistributedOptimizer opt(o);
      const size_t n = 5;
      std::vector<float> w(n, 1.0f), g(n);
      opt.add_parameter("w", w.data(), g.data(), n);
      std::vector<double> rw(n, 1.0), m(n, 0), v(n, 0);
      const double b1 = 0.9, b2 = 0.999, eps = 1e-8, lr = 0.01, wd = 0.1;
      for (int s = 0; s < 5; ++s) {
        for (size_t i = 0; i < n; ++i) g[i] = grad_at(s, i);
        opt.step();
        for (size_t i = 0; i < n; ++i) {
          double gi = grad_at(s, i);
          if (kind == OptimizerKind::kAdamW) rw[i] *= 1 - lr * wd;
          else gi += wd * rw[i];
          m[i] = b1 * m[i] + (1 - b1) * gi;
          v[i] = b2 * v[i] + (1 - b2) * gi * gi;
          double mh = m[i] / (1 - std::pow(b1, s + 1)), vh = v[i] / (1 - std::pow(b2, s + 1));
          rw[i] -= lr * mh / (std::sqrt(vh) + eps);
        }
      }
      for (size_t i = 0; i < n; ++i) CHECK(w[i] == Approx(rw[i]).epsilon(1e-5));
    }
  }
}

TEST_CASE("gradient accumulation: A passes average like one pass over the union (user and zero-copy grads)") {
  const auto data = test::make_dataset(64, 4);
  for (bool zero_copy : {false, true}) {
    DYNAMIC_SECTION("zero_copy " << zero_copy) {
      test::TinyMlp one(4, 6), acc(4, 6);
      auto o = local_options(OptimizerKind::kSGD, 0.1);
      DistributedOptimizer opt1(o);
      auto o4 = o;
      o4.accumulation_steps = 4;
      DistributedOptimizer opt4(o4);
      for (auto& p : one.parameters()) opt1.add_parameter("p", p.data, p.grad, p.count);
      for (auto& p : acc.parameters()) opt4.add_parameter("p", p.data, zero_copy ? nullptr : p.grad, p.count);
      CHECK(opt4.accumulation_steps() == 4);
      auto params = acc.parameters();
      for (int s = 0; s < 3; ++s) {
        one.backward(data, s * 16, 16, [&](size_t i) { opt1.grad_ready(i); });
        opt1.step();
        for (int pass = 0; pass < 4; ++pass) {
          acc.backward(data, s * 16 + pass * 4, 4, [&](size_t i) {
            if (zero_copy) std::copy(params[i].grad, params[i].grad + params[i].count, opt4.grad_slot(i));
            opt4.grad_ready(i);
          });
        }
        opt4.step();
      }
      for (size_t i = 0; i < one.w1.size(); ++i) CHECK(acc.w1[i] == Approx(one.w1[i]).epsilon(1e-5).margin(1e-7));
      CHECK(acc.b2[0] == Approx(one.b2[0]).epsilon(1e-5));
    }
  }
}

TEST_CASE("accumulation without hooks: backward_done() per pass, step() too early is a clear error") {
  auto o = local_options(OptimizerKind::kSGD, 1.0);
  o.optimizer.momentum = 0;
  o.accumulation_steps = 2;
  DistributedOptimizer opt(o);
  std::vector<float> w{0}, g{0};
  opt.add_parameter("w", w.data(), g.data(), 1);
  g[0] = 1;
  opt.backward_done();
  g[0] = 3;
  opt.step();  // ends the second pass: mean gradient 2
  CHECK(w[0] == Approx(-2.0));
  o.accumulation_steps = 3;
  DistributedOptimizer bad(o);
  bad.add_parameter("w", w.data(), g.data(), 1);
  bad.backward_done();
  CHECK_THROWS_WITH(bad.step(), Catch::Contains("after 2 of 3"));
  // The failed step was discarded: a full step works again.
  bad.backward_done();
  bad.backward_done();
  bad.step();
  CHECK(bad.step_count() == 1);
}

TEST_CASE("buckets: reverse registration order, capacity, fusion off") {
  std::vector<float> a(100), b(300), c(50), d(2000), g(2000);
  auto o = local_options(OptimizerKind::kSGD, 0.1);
  o.bucket_cap_bytes = 400 * sizeof(float);
  DistributedOptimizer opt(o);
  opt.add_parameter("a", a.data(), g.data(), a.size());
  opt.add_parameter("b", b.data(), g.data(), b.size());
  opt.add_parameter("c", c.data(), g.data(), c.size());
  opt.add_parameter("d", d.data(), g.data(), d.size());
  // Reverse: d (2000 > cap: own bucket 0), then c + b = 350 (bucket 1), then a would exceed: bucket 2.
  CHECK(opt.num_buckets() == 3);
  CHECK(opt.bucket_of(3) == 0);
  CHECK(opt.bucket_of(2) == 1);
  CHECK(opt.bucket_of(1) == 1);
  CHECK(opt.bucket_of(0) == 2);
  CHECK(opt.grad_slot(1) == opt.grad_slot(2) + 50);  // c first, then b, contiguous
  CHECK_THROWS_AS(opt.add_parameter("late", a.data(), g.data(), 1), InvalidArgument);
  o.fuse = false;
  DistributedOptimizer unfused(o);
  for (auto* p : {&a, &b, &c}) unfused.add_parameter("p", p->data(), g.data(), p->size());
  CHECK(unfused.num_buckets() == 3);
}

TEST_CASE("misuse of grad_ready and registration gives clear errors") {
  DistributedOptimizer opt(local_options(OptimizerKind::kSGD, 0.1));
  std::vector<float> w(3), g(3);
  CHECK_THROWS_AS(opt.add_parameter("null", nullptr, g.data(), 3), InvalidArgument);
  CHECK_THROWS_AS(opt.add_parameter("empty", w.data(), g.data(), 0), InvalidArgument);
  opt.add_parameter("w", w.data(), g.data(), 1);
  opt.add_parameter("v", w.data() + 1, g.data() + 1, 2);
  CHECK_THROWS_WITH(opt.grad_ready(7), Catch::Contains("out of range"));
  opt.grad_ready(1);
  CHECK_THROWS_WITH(opt.grad_ready(1), Catch::Contains("reported twice"));
  DistributedOptimizerOptions bad = local_options(OptimizerKind::kSGD, 0.1);
  bad.optimizer.momentum = 1.5;
  CHECK_THROWS_AS(DistributedOptimizer(bad), InvalidArgument);
  DistributedOptimizer none(local_options(OptimizerKind::kSGD, 0.1));
  CHECK_THROWS_WITH(none.step(), Catch::Contains("no parameter"));
}

TEST_CASE("momentum compensation: the pre-resize buffer ramps by gamma_t (eq. 5-6), new updates are untouched") {
  for (int T : {0, 8}) {
    DYNAMIC_SECTION("T = " << T) {
      auto o = local_options(OptimizerKind::kSGD, 0.1);
      o.optimizer.momentum = 0.9;
      o.scaling.compensation_steps = T;
      DistributedOptimizer opt(o);
      const size_t n = 3;
      std::vector<float> w(n, 0), g(n);
      opt.add_parameter("w", w.data(), g.data(), n);
      opt.on_generation(gen(1, 1));
      // Reference in the v-form with the decomposition v = gamma_t * mu^(t - t0) v_t0 + (new part).
      std::vector<double> rw(n, 0), v(n, 0), v0(n, 0), fresh(n, 0);
      const double mu = 0.9;
      const int t0 = 4, k = 3;
      for (int s = 0; s < 20; ++s) {
        if (s == t0) {
          opt.on_generation(gen(2, k));  // linear LR: 0.1 -> 0.3, k = 3
          REQUIRE(opt.rescaler().compensation_k() == Approx(3.0));
          v0 = v;
        }
        const double lr = s < t0 ? 0.1 : 0.3;
        CHECK(opt.lr() == Approx(lr));
        for (size_t i = 0; i < n; ++i) g[i] = grad_at(s, i);
        opt.step();
        for (size_t i = 0; i < n; ++i) {
          if (s < t0) {
            v[i] = mu * v[i] + lr * grad_at(s, i);
          } else {
            double gamma = edl::optim::compensation_gamma(s, t0, T, k);
            double decayed = std::pow(mu, s - t0) * v0[i];
            v[i] = mu * (gamma * decayed + fresh[i]) + lr * grad_at(s, i);
            fresh[i] = mu * fresh[i] + lr * grad_at(s, i);
          }
          rw[i] -= v[i];
        }
      }
      for (size_t i = 0; i < n; ++i) CHECK(w[i] == Approx(rw[i]).epsilon(1e-4));
    }
  }
}

TEST_CASE("optimizer snapshot: rollback restores slots and rescaling, the generation is applied once") {
  const auto data = test::make_dataset(96, 3);
  auto o = local_options(OptimizerKind::kSGD, 0.05);
  o.optimizer.momentum = 0.9;
  o.scaling.warmup_steps = 3;
  auto run = [&](bool with_rollback) {
    test::TinyMlp m(3, 5);
    DistributedOptimizer opt(o);
    for (auto& p : m.parameters()) opt.add_parameter("p", p.data, p.grad, p.count);
    opt.on_generation(gen(1, 1));
    auto train = [&](int s) {
      m.backward(data, s * 8, 8, [&](size_t i) { opt.grad_ready(i); });
      opt.step();
    };
    for (int s = 0; s < 3; ++s) train(s);
    std::string snap = opt.save();
    test::TinyMlp saved = m;
    opt.on_generation(gen(2, 2));
    for (int s = 3; s < 5; ++s) train(s);  // steps 3-4 under generation 2 (ramps in progress)
    if (with_rollback) {  // failure: back to the step-3 commit, generation 2 replayed
      std::copy(saved.w1.begin(), saved.w1.end(), m.w1.begin());  // in place: the optimizer keeps pointers
      std::copy(saved.b1.begin(), saved.b1.end(), m.b1.begin());
      std::copy(saved.w2.begin(), saved.w2.end(), m.w2.begin());
      std::copy(saved.b2.begin(), saved.b2.end(), m.b2.begin());
      opt.load(snap);
      CHECK(opt.step_count() == 3);
      opt.on_generation(gen(2, 2));
      CHECK(opt.rescaler().resizes() == 1);
      opt.on_generation(gen(2, 2));  // the state's callback and a second delivery: still once
      CHECK(opt.rescaler().resizes() == 1);
      for (int s = 3; s < 5; ++s) train(s);
    }
    for (int s = 5; s < 12; ++s) train(s);
    return m;
  };
  test::TinyMlp a = run(false), b = run(true);
  for (size_t i = 0; i < a.w1.size(); ++i) CHECK(b.w1[i] == a.w1[i]);
  CHECK(b.b2[0] == a.b2[0]);

  DistributedOptimizer opt(o);
  std::vector<float> w(4), g(4);
  opt.add_parameter("w", w.data(), g.data(), 4);
  CHECK_THROWS_AS(opt.load("nonsense"), DataError);
  std::string good = opt.save();
  CHECK_THROWS_AS(opt.load(good.substr(0, good.size() - 3)), DataError);
  DistributedOptimizer other(o);
  std::vector<float> w2(5), g2(5);
  other.add_parameter("w", w2.data(), g2.data(), 5);
  CHECK_THROWS_AS(other.load(good), DataError);
  auto adam = local_options(OptimizerKind::kAdam, 0.01);
  DistributedOptimizer a4(adam);
  a4.add_parameter("w", w.data(), g.data(), 4);
  CHECK_THROWS_AS(a4.load(good), DataError);  // slots of another optimizer kind
}

TEST_CASE("through elastic::State: commit / restore carry the optimizer, the generation is applied once") {
  const auto data = test::make_dataset(96, 3);
  auto o = local_options(OptimizerKind::kSGD, 0.05);
  o.optimizer.momentum = 0.9;
  // commit_mid_ramp: the commit is taken at step 5, inside the compensation ramp started at step 3
  // (the compensation buffer must roll back with the velocity); otherwise at step 3, before the resize.
  auto run = [&](bool fail, bool commit_mid_ramp) {
    test::TinyMlp m(3, 5);
    DistributedOptimizer opt(o);
    elastic::State state;
    const char* names[4] = {"w1", "b1", "w2", "b2"};
    auto params = m.parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      opt.add_parameter(names[i], params[i].data, params[i].grad, params[i].count);
      state.register_tensor(names[i], params[i].data, params[i].count, DataType::kFloat32);
    }
    state.register_component("optimizer", &opt);
    opt.on_generation(gen(1, 1));
    auto train = [&](int s) {
      m.backward(data, s * 8, 8, [&](size_t i) { opt.grad_ready(i); });
      opt.step();
    };
    for (int s = 0; s < 3; ++s) train(s);
    if (!commit_mid_ramp) state.commit();
    opt.on_generation(gen(2, 3));  // resize 1 -> 3: LR x3, momentum compensation k = 3 over 8 steps
    for (int s = 3; s < 5; ++s) train(s);
    if (commit_mid_ramp) state.commit();
    for (int s = 5; s < 7; ++s) train(s);
    if (fail) {
      state.restore();
      const int back = commit_mid_ramp ? 5 : 3;
      CHECK(opt.step_count() == back);
      CHECK(opt.rescaler().size() == (commit_mid_ramp ? 3 : 1));
      opt.on_generation(gen(2, 3));  // the replayed generation (state callback + the optimizer's own check)
      opt.on_generation(gen(2, 3));
      CHECK(opt.rescaler().resizes() == 1);
      CHECK(opt.rescaler().resize_step() == 3);
      for (int s = back; s < 7; ++s) train(s);
    }
    for (int s = 7; s < 12; ++s) train(s);
    CHECK(opt.lr() == Approx(0.15));
    return m;
  };
  for (bool mid : {false, true}) {
    test::TinyMlp a = run(false, mid), b = run(true, mid);
    CHECK(b.w1 == a.w1);  // bit-identical: nothing applied twice, nothing lost
    CHECK(b.w2 == a.w2);
    CHECK(b.b1 == a.b1);
  }
}
