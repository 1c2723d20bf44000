// The rescaling formulas (docs/optim.md) and the exactly-once bookkeeping across rollbacks.
#include <catch2/catch.hpp>

#include <cmath>

#include "edl/error.h"
#include "edl/optim/rescale.h"

using namespace edl;
using namespace edl::optim;
using Approx = Catch::Detail::Approx;

namespace {
elastic::GenerationInfo gen(uint64_t id, int size, int prev = 0) {
  elastic::GenerationInfo g;
  g.generation = id;
  g.size = size;
  g.previous_size = prev;
  return g;
}
}  // namespace

TEST_CASE("plan_batch: fixed local batch follows the size up to the maximum global batch") {
  BatchPolicy p;
  p.local_batch = 64;
  BatchPlan a = plan_batch(p, 3);
  CHECK(a.local_batch == 64);
  CHECK(a.global_batch == 192);
  CHECK(a.micro_batch == 64);
  CHECK(a.accumulation_steps == 1);
  p.max_global_batch = 256;
  CHECK(plan_batch(p, 4).global_batch == 256);
  BatchPlan c = plan_batch(p, 5);  // 320 > 256: local shrinks to 256 / 5 = 51
  CHECK(c.local_batch == 51);
  CHECK(c.global_batch == 255);
  CHECK_THROWS_AS(plan_batch(p, 300), InvalidArgument);  // 256 / 300 = 0 samples per worker
  CHECK_THROWS_AS(plan_batch(p, 0), InvalidArgument);
}

TEST_CASE("plan_batch: fixed global batch splits over workers with accumulation above the maximum") {
  BatchPolicy p;
  p.mode = BatchMode::kFixedGlobal;
  p.global_batch = 512;
  p.max_local_batch = 128;
  BatchPlan one = plan_batch(p, 1);
  CHECK(one.local_batch == 512);
  CHECK(one.accumulation_steps == 4);
  CHECK(one.micro_batch == 128);
  BatchPlan four = plan_batch(p, 4);
  CHECK(four.local_batch == 128);
  CHECK(four.accumulation_steps == 1);
  BatchPlan eight = plan_batch(p, 8);
  CHECK(eight.local_batch == 64);
  CHECK(eight.global_batch == 512);
  // Uneven: 512 / 3 = 170 -> 2 passes of 85; the plan says so exactly.
  BatchPlan three = plan_batch(p, 3);
  CHECK(three.accumulation_steps == 2);
  CHECK(three.micro_batch == 85);
  CHECK(three.local_batch == 170);
  CHECK(three.global_batch == 510);
  CHECK(three.micro_batch * three.accumulation_steps == three.local_batch);
  p.global_batch = 0;
  CHECK_THROWS_AS(plan_batch(p, 2), InvalidArgument);
  p.global_batch = 3;
  CHECK_THROWS_AS(plan_batch(p, 4), InvalidArgument);
}

TEST_CASE("lr scaling: linear, sqrt and none against size / base_size") {
  ScalingPolicy p;
  p.base_lr = 0.1;
  p.base_size = 2;
  p.lr_scaling = LrScaling::kLinear;
  CHECK(target_lr(p, 0, 0, 2) == Approx(0.1));
  CHECK(target_lr(p, 0, 0, 8) == Approx(0.4));
  CHECK(target_lr(p, 0, 0, 1) == Approx(0.05));
  p.lr_scaling = LrScaling::kSqrt;
  CHECK(target_lr(p, 0, 0, 8) == Approx(0.2));
  CHECK(target_lr(p, 0, 0, 4) == Approx(0.1 * std::sqrt(2.0)));
  p.lr_scaling = LrScaling::kNone;
  CHECK(target_lr(p, 0, 0, 8) == Approx(0.1));
  // A schedule multiplies in.
  p.lr_scaling = LrScaling::kLinear;
  p.schedule = [](int64_t epoch, int64_t) { return epoch < 10 ? 0.1 : 0.01; };
  CHECK(target_lr(p, 12, 0, 4) == Approx(0.02));
}

TEST_CASE("lr scaling follows the global batch: capped by max_global_batch, constant for a fixed global batch") {
  ScalingPolicy p;
  p.base_lr = 0.1;
  p.batch.local_batch = 32;
  p.batch.max_global_batch = 128;
  CHECK(batch_ratio(p, 4) == Approx(4.0));
  CHECK(batch_ratio(p, 8) == Approx(4.0));  // 8 x 16 = 128
  CHECK(target_lr(p, 0, 0, 8) == Approx(0.4));
  p.batch = BatchPolicy{};
  p.batch.mode = BatchMode::kFixedGlobal;
  p.batch.global_batch = 256;
  CHECK(target_lr(p, 0, 0, 1) == Approx(0.1));
  CHECK(target_lr(p, 0, 0, 4) == Approx(0.1));
}

TEST_CASE("lr callback: the seeds' _schedule(epoch) * hvd.size() in one line") {
  auto schedule = [](int64_t epoch) { return epoch < 3 ? 0.01 : 0.001; };
  ScalingPolicy p;
  p.lr_scaling = LrScaling::kCallback;
  p.lr_callback = [&](int64_t epoch, int64_t, int size) { return schedule(epoch) * size; };
  CHECK(target_lr(p, 0, 0, 4) == Approx(0.04));
  CHECK(target_lr(p, 5, 0, 4) == Approx(0.004));
  p.lr_callback = [](int64_t, int64_t, int) { return -1.0; };
  CHECK_THROWS_AS(target_lr(p, 0, 0, 1), InvalidArgument);
  ScalingPolicy missing;
  missing.lr_scaling = LrScaling::kCallback;
  CHECK_THROWS_AS(Rescaler(missing), InvalidArgument);
}

TEST_CASE("warmup ramp: linear from the old LR multiplier to 1 over W steps (Goyal et al.)") {
  CHECK(warmup_factor(100, 100, 10, 0.25) == Approx(0.25));
  CHECK(warmup_factor(105, 100, 10, 0.25) == Approx(0.625));
  CHECK(warmup_factor(110, 100, 10, 0.25) == Approx(1.0));
  CHECK(warmup_factor(500, 100, 10, 0.25) == Approx(1.0));
  CHECK(warmup_factor(105, 100, 0, 0.25) == 1.0);   // W = 0: jump
  CHECK(warmup_factor(105, 100, 10, 2.0) == 1.0);   // decreases apply at once
}

TEST_CASE("momentum compensation gamma: eq. 6, ramps 1 -> k over T steps then stays k") {
  const double k = 4.0;
  for (int t = 0; t < 8; ++t) CHECK(compensation_gamma(50 + t, 50, 8, k) == Approx(1.0 + t / 8.0 * 3.0));
  CHECK(compensation_gamma(58, 50, 8, k) == Approx(4.0));
  CHECK(compensation_gamma(90, 50, 8, k) == Approx(4.0));
  CHECK(compensation_gamma(50, 50, 0, k) == Approx(4.0));  // T = 0: eq. 5, at once
  CHECK(compensation_gamma(54, 50, 8, 0.5) == Approx(0.75));  // shrinking works the same way
}

TEST_CASE("Rescaler: first generation, then a resize starts warmup and compensation at the current step") {
  ScalingPolicy p;
  p.base_lr = 0.1;
  p.warmup_steps = 4;
  p.compensation_steps = 8;
  Rescaler r(p);
  REQUIRE(r.apply_generation(gen(1, 2)));
  CHECK(r.step_params().lr == Approx(0.2));  // no warmup at start unless asked
  CHECK_FALSE(r.step_params().compensating);
  for (int i = 0; i < 10; ++i) r.advance();
  REQUIRE(r.apply_generation(gen(2, 4, 2)));
  CHECK(r.resize_step() == 10);
  CHECK(r.compensation_k() == Approx(2.0));
  StepParams s = r.step_params();
  CHECK(s.lr == Approx(0.2));  // warmup starts from the old LR
  CHECK(s.compensating);
  CHECK(s.gamma == Approx(1.0));
  CHECK(s.prev_gamma == Approx(1.0));
  r.advance();
  s = r.step_params();
  CHECK(s.lr == Approx(0.2 + 0.2 * 0.25));
  CHECK(s.gamma == Approx(1.125));
  CHECK(s.prev_gamma == Approx(1.0));
  for (int i = 0; i < 7; ++i) r.advance();  // step 18 = t0 + T: last compensation increment
  s = r.step_params();
  CHECK(s.lr == Approx(0.4));
  CHECK(s.compensating);
  CHECK(s.gamma == Approx(2.0));
  CHECK(s.prev_gamma == Approx(1.875));
  r.advance();
  CHECK_FALSE(r.step_params().compensating);
  // Shrinking: LR drops at once (no warmup for decreases), k = 0.1 / 0.4.
  REQUIRE(r.apply_generation(gen(3, 1, 4)));
  CHECK(r.step_params().lr == Approx(0.1));
  CHECK(r.compensation_k() == Approx(0.25));
}

TEST_CASE("Rescaler: warmup_at_start ramps from the base_size LR") {
  ScalingPolicy p;
  p.base_lr = 0.1;
  p.warmup_steps = 10;
  p.warmup_at_start = true;
  Rescaler r(p);
  r.apply_generation(gen(1, 8));
  CHECK(r.step_params().lr == Approx(0.1));
  for (int i = 0; i < 5; ++i) r.advance();
  CHECK(r.step_params().lr == Approx(0.1 + 0.7 * 0.5));
  for (int i = 0; i < 5; ++i) r.advance();
  CHECK(r.step_params().lr == Approx(0.8));
}

TEST_CASE("Rescaler: compensation off, and a callback policy's k is the callback's LR ratio") {
  ScalingPolicy p;
  p.momentum_compensation = false;
  Rescaler r(p);
  r.apply_generation(gen(1, 2));
  r.apply_generation(gen(2, 6, 2));
  CHECK(r.compensation_k() == 1.0);
  CHECK_FALSE(r.step_params().compensating);
  ScalingPolicy c;
  c.lr_scaling = LrScaling::kCallback;
  c.lr_callback = [](int64_t, int64_t, int size) { return 0.01 * std::sqrt(static_cast<double>(size)); };
  Rescaler rc(c);
  rc.apply_generation(gen(1, 1));
  rc.apply_generation(gen(2, 9, 1));
  CHECK(rc.compensation_k() == Approx(3.0));
  CHECK(rc.step_params().lr == Approx(0.03));
}

TEST_CASE("Rescaler: exactly once per generation, even across rollbacks") {
  ScalingPolicy p;
  p.base_lr = 0.1;
  Rescaler r(p);
  r.apply_generation(gen(1, 2));
  for (int i = 0; i < 5; ++i) r.advance();
  const std::string commit_g1 = r.save();  // committed at step 5 in generation 1 (size 2)

  // Generation 2 (size 4): applied once; the same generation again (state.on_generation and the
  // optimizer's own check both fire) is a no-op.
  CHECK(r.apply_generation(gen(2, 4, 2)));
  CHECK_FALSE(r.apply_generation(gen(2, 4, 2)));
  CHECK(r.resizes() == 1);
  CHECK(r.compensation_k() == Approx(2.0));
  for (int i = 0; i < 3; ++i) r.advance();
  const std::string commit_g2 = r.save();  // committed at step 8 in generation 2
  r.advance();

  // A peer fails at step 9: rollback to the step-8 commit, then generation 3 with size 3.
  r.load(commit_g2);
  CHECK(r.step() == 8);
  CHECK(r.size() == 4);
  CHECK_FALSE(r.apply_generation(gen(2, 4, 2)));  // replaying generation 2 must not rescale again
  CHECK(r.apply_generation(gen(3, 3, 4)));
  CHECK(r.resizes() == 2);
  CHECK(r.compensation_k() == Approx(0.75));  // relative to the committed size 4, not applied twice
  CHECK(r.resize_step() == 8);
  CHECK(r.step_params().lr == Approx(0.3));

  // Rollback past the resize to the generation-1 commit, then generation 4 with size 4: the state
  // says size 2, so the resize is 2 -> 4 once (k = 2), not 4 -> 4 or 3 -> 4.
  r.load(commit_g1);
  CHECK(r.size() == 2);
  CHECK(r.resizes() == 0);
  CHECK(r.apply_generation(gen(4, 4, 3)));
  CHECK_FALSE(r.apply_generation(gen(4, 4, 3)));
  CHECK(r.resizes() == 1);
  CHECK(r.compensation_k() == Approx(2.0));
  CHECK(r.resize_step() == 5);
  CHECK(r.step_params().lr == Approx(0.4));

  // A new generation of the same size (a worker replaced) changes nothing.
  CHECK(r.apply_generation(gen(5, 4, 4)));
  CHECK(r.resizes() == 1);
  CHECK(r.resize_step() == 5);
}

TEST_CASE("Rescaler: save/load round trip and malformed snapshots") {
  ScalingPolicy p;
  p.warmup_steps = 3;
  Rescaler a(p);
  a.apply_generation(gen(7, 3));
  a.advance();
  a.apply_generation(gen(8, 5, 3));
  a.set_epoch(4);
  Rescaler b(p);
  b.load(a.save());
  CHECK(b.generation() == 8);
  CHECK(b.size() == 5);
  CHECK(b.epoch() == 4);
  CHECK(b.step_params().lr == a.step_params().lr);
  CHECK(b.compensation_k() == a.compensation_k());
  CHECK(b.batch_plan().global_batch == a.batch_plan().global_batch);
  CHECK_THROWS_AS(b.load("garbage"), DataError);
  CHECK_THROWS_AS(b.load(""), DataError);
  CHECK_THROWS_AS(b.load("edl-rescaler-v1 1 2 3"), DataError);
  CHECK_THROWS_AS(Rescaler().step_params(), InvalidArgument);
}

TEST_CASE("Rescaler: a checkpoint from another job incarnation with the same generation id still rescales") {
  ScalingPolicy p;
  p.base_lr = 0.1;
  Rescaler before(p);
  before.apply_generation(gen(1, 4));
  for (int i = 0; i < 7; ++i) before.advance();
  Rescaler resumed(p);
  resumed.load(before.save());  // the whole job restarted with 2 workers; ids start at 1 again
  CHECK(resumed.apply_generation(gen(1, 2)));
  CHECK(resumed.size() == 2);
  CHECK(resumed.compensation_k() == Approx(0.5));
  CHECK(resumed.step_params().lr == Approx(0.2));
  CHECK_FALSE(resumed.apply_generation(gen(1, 2)));
}
