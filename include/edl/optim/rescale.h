// Rescaling hooks: how the learning rate, the momentum and the batch split follow the world size.
//
// When the number of workers changes (and at the first generation) the hyper-parameters are
// recomputed from a ScalingPolicy (formulas and references in docs/optim.md):
//   - learning rate: base schedule x f(size), f = linear (rho), square root (sqrt(rho)) or none (1),
//     rho = global batch at `size` / global batch at `base_size`; or a user callback
//     (epoch, step, size) -> lr that is the whole schedule, e.g. the seeds' Keras callback:
//         policy.lr_callback = [](int64_t epoch, int64_t, int size) { return schedule(epoch) * size; };
//   - warmup after an LR increase caused by a resize: linear ramp over W steps (Goyal et al. 2017);
//   - momentum compensation after a resize by LR factor k (Lin et al. 2019, eqs. 5-6): the momentum
//     buffer accumulated before the resize is scaled up to k, ramping as
//         gamma_t = 1 + (t - t0) / T * (k - 1)   for t - t0 < T,   k   afterwards   (T = 8);
//   - batch split: a fixed local batch (the global batch follows the size, up to a maximum), or a
//     fixed global batch (local = global / size, split into gradient-accumulation passes when the
//     local batch exceeds the per-worker maximum).
//
// The pure functions below are the formulas; Rescaler is the bookkeeping that applies them exactly
// once per membership generation. It is an elastic::Stateful component: its save()/load() follow the
// state's commits and rollbacks, so a rollback to a commit taken before a resize re-applies that
// resize once, and a generation already applied is never applied again.
//
// Thread-safety: the functions are pure; a Rescaler is used by the training thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "edl/export.h"
#include "edl/state.h"

namespace edl::optim {

enum class LrScaling : uint8_t {
  kNone = 0,      // lr = schedule(epoch, step)
  kLinear = 1,    // lr = schedule(epoch, step) * rho            (Goyal et al. 2017, linear scaling rule)
  kSqrt = 2,      // lr = schedule(epoch, step) * sqrt(rho)      (Krizhevsky 2014; for adaptive optimizers)
  kCallback = 3,  // lr = lr_callback(epoch, step, size)
};

enum class BatchMode : uint8_t {
  kFixedLocal = 0,   // every worker keeps local_batch; global = local_batch * size (<= max_global_batch)
  kFixedGlobal = 1,  // the job keeps global_batch; local = global_batch / size
};

struct BatchPolicy {
  BatchMode mode = BatchMode::kFixedLocal;
  int local_batch = 32;      // kFixedLocal: samples per worker per step. Default 32.
  int global_batch = 0;      // kFixedGlobal: samples per step over all workers (required there). Default 0.
  int max_local_batch = 0;   // samples one backward pass may hold (memory); above it the local batch is
                             // split into gradient-accumulation passes. 0 = unlimited (default).
  int max_global_batch = 0;  // kFixedLocal: cap on local * size; past it the local batch shrinks to
                             // max_global_batch / size (Seed 003 / EDL paper). 0 = unlimited (default).
};

// The batch split at one world size. local_batch = micro_batch * accumulation_steps and
// global_batch = local_batch * size hold exactly; global_batch may be below the requested global
// batch by less than size * accumulation_steps samples when it does not divide evenly.
struct BatchPlan {
  int size = 1;
  int global_batch = 0;
  int local_batch = 0;
  int micro_batch = 0;         // samples per backward pass
  int accumulation_steps = 1;  // backward passes per optimizer step
};

// Throws InvalidArgument for size < 1 or a policy that gives no sample per worker.
EDL_API BatchPlan plan_batch(const BatchPolicy& policy, int size);

using LrCallback = std::function<double(int64_t epoch, int64_t step, int size)>;
using LrSchedule = std::function<double(int64_t epoch, int64_t step)>;

struct ScalingPolicy {
  double base_lr = 0.1;                        // LR at base_size workers (when no schedule). Default 0.1.
  LrSchedule schedule;                         // optional base LR over time; empty = constant base_lr
  int base_size = 1;                           // world size base_lr was tuned for. Default 1.
  LrScaling lr_scaling = LrScaling::kLinear;   // default: linear scaling rule
  LrCallback lr_callback;                      // required for kCallback: returns the LR itself
  int warmup_steps = 0;                        // W: ramp over W steps after a resize that raises the LR
                                               // (decreases apply at once). 0 = jump (default).
  bool warmup_at_start = false;                // also ramp from the base_size LR at the first generation
  bool momentum_compensation = true;           // scale the SGD momentum buffer by the LR factor k
  int compensation_steps = 8;                  // T of eq. 6; 0 = full compensation at once (eq. 5)
  BatchPolicy batch;                           // the batch split; also defines rho
};

// rho: global batch at `size` over the global batch at policy.base_size (equals size / base_size
// for a fixed local batch without a cap; 1 for a fixed global batch).
EDL_API double batch_ratio(const ScalingPolicy& policy, int size);
// The size factor f(size) of kNone / kLinear / kSqrt (1, rho, sqrt(rho)); for kCallback the ratio
// lr_callback(epoch, step, size) / lr_callback(epoch, step, base_size) is what a resize compares.
EDL_API double lr_size_factor(const ScalingPolicy& policy, int size);
// The LR the policy prescribes at (epoch, step, size), without warmup.
EDL_API double target_lr(const ScalingPolicy& policy, int64_t epoch, int64_t step, int size);
// Warmup multiplier at step t of a ramp started at t0 from multiplier `from` (< 1) up to 1 over W
// steps: from + (1 - from) * min(1, (t - t0) / W). W <= 0 or t < t0 gives 1 / from respectively.
EDL_API double warmup_factor(int64_t t, int64_t t0, int warmup_steps, double from);
// Eq. 6 of the survey (Lin et al. 2019): gamma_t = 1 + (t - t0)/T (k - 1) for 0 <= t - t0 < T, else k.
EDL_API double compensation_gamma(int64_t t, int64_t t0, int T, double k);

// The hyper-parameters for one optimizer step.
struct StepParams {
  double lr = 0;          // learning rate for this step (schedule x size factor x warmup)
  double gamma = 1;       // momentum compensation factor gamma_t for the pre-resize buffer (1 = none)
  double prev_gamma = 1;  // gamma_{t-1} (the scale already applied to that buffer)
  bool compensating = false;  // a compensation ramp is active at this step (t0 <= t <= t0 + T)
};

// Applies the policy once per generation. The optimizer step counter `step()` counts optimizer
// updates and is part of the saved state, as is the epoch set with set_epoch().
class EDL_API Rescaler : public elastic::Stateful {
 public:
  explicit Rescaler(ScalingPolicy policy = {});

  const ScalingPolicy& policy() const { return policy_; }

  // Applies a new generation: recomputes the batch plan, and, when the size differs from the size
  // the current hyper-parameters were computed for, starts a warmup and a momentum-compensation
  // ramp at the current step. Idempotent per generation: returns false (and does nothing) when
  // info.generation was already applied in the current (possibly rolled back) state with the same
  // size (ids restart with a new job incarnation, so a checkpoint may carry the same id with another
  // size: that is applied).
  bool apply_generation(const elastic::GenerationInfo& info);
  void on_generation(const elastic::GenerationInfo& info) override { apply_generation(info); }

  // The hyper-parameters of the current step (before advance()).
  StepParams step_params() const;
  // Marks the current optimizer step done.
  void advance() { ++step_; }

  bool has_generation() const { return has_generation_; }
  uint64_t generation() const { return generation_; }
  int size() const { return size_; }
  int64_t step() const { return step_; }
  int64_t epoch() const { return epoch_; }
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  const BatchPlan& batch_plan() const { return plan_; }
  // Step of the last resize (t0) and the compensation factor k of the momentum ramp (1 = none).
  int64_t resize_step() const { return t0_; }
  double compensation_k() const { return k_; }
  // Number of resizes applied since construction in this state (for tests and logs).
  int64_t resizes() const { return resizes_; }

  std::string save() override;
  void load(const std::string& snapshot) override;  // throws DataError for a malformed snapshot

 private:
  ScalingPolicy policy_;
  bool has_generation_ = false;
  uint64_t generation_ = 0;
  int size_ = 0;
  int64_t step_ = 0;
  int64_t epoch_ = 0;
  int64_t t0_ = 0;
  double warmup_from_ = 1.0;  // warmup multiplier at t0
  double k_ = 1.0;            // momentum compensation factor of the last resize
  int64_t resizes_ = 0;
  BatchPlan plan_;
};

}  // namespace edl::optim
