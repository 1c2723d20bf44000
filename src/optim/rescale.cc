// The rescaling formulas and the exactly-once-per-generation bookkeeping (docs/optim.md).
#include "edl/optim/rescale.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "common/logging.h"
#include "edl/error.h"

namespace edl::optim {

namespace {

int ceil_div(int a, int b) { return (a + b - 1) / b; }

void check_policy(const ScalingPolicy& p) {
  EDL_CHECK(p.base_size >= 1, InvalidArgument,
            "ScalingPolicy.base_size must be >= 1, got " + std::to_string(p.base_size));
  EDL_CHECK(p.warmup_steps >= 0, InvalidArgument,
            "ScalingPolicy.warmup_steps must be >= 0, got " + std::to_string(p.warmup_steps));
  EDL_CHECK(p.compensation_steps >= 0, InvalidArgument,
            "ScalingPolicy.compensation_steps must be >= 0, got " + std::to_string(p.compensation_steps));
  EDL_CHECK(p.lr_scaling != LrScaling::kCallback || p.lr_callback, InvalidArgument,
            "ScalingPolicy.lr_scaling is kCallback but lr_callback is empty");
}

double checked_lr(double lr, const char* what, int size) {
  EDL_CHECK(std::isfinite(lr) && lr >= 0, InvalidArgument,
            std::string(what) + " returned learning rate " + std::to_string(lr) + " at size " +
                std::to_string(size) + " (must be finite and >= 0)");
  return lr;
}

}  // namespace

BatchPlan plan_batch(const BatchPolicy& policy, int size) {
  EDL_CHECK(size >= 1, InvalidArgument, "plan_batch: world size must be >= 1, got " + std::to_string(size));
  EDL_CHECK(policy.max_local_batch >= 0 && policy.max_global_batch >= 0, InvalidArgument,
            "BatchPolicy: max_local_batch / max_global_batch must be >= 0");
  int local = 0;
  if (policy.mode == BatchMode::kFixedLocal) {
    EDL_CHECK(policy.local_batch >= 1, InvalidArgument,
              "BatchPolicy.local_batch must be >= 1 for kFixedLocal, got " + std::to_string(policy.local_batch));
    local = policy.local_batch;
    if (policy.max_global_batch > 0 && static_cast<int64_t>(local) * size > policy.max_global_batch) {
      local = policy.max_global_batch / size;
      EDL_CHECK(local >= 1, InvalidArgument,
                "BatchPolicy.max_global_batch " + std::to_string(policy.max_global_batch) +
                    " leaves no sample per worker at size " + std::to_string(size));
    }
  } else {
    EDL_CHECK(policy.global_batch >= 1, InvalidArgument,
              "BatchPolicy.global_batch must be >= 1 for kFixedGlobal, got " + std::to_string(policy.global_batch));
    local = policy.global_batch / size;
    EDL_CHECK(local >= 1, InvalidArgument,
              "BatchPolicy.global_batch " + std::to_string(policy.global_batch) + " is smaller than the world size " +
                  std::to_string(size));
  }
  BatchPlan plan;
  plan.size = size;
  plan.accumulation_steps = policy.max_local_batch > 0 ? ceil_div(local, policy.max_local_batch) : 1;
  plan.micro_batch = local / plan.accumulation_steps;
  plan.local_batch = plan.micro_batch * plan.accumulation_steps;
  plan.global_batch = plan.local_batch * size;
  return plan;
}

double batch_ratio(const ScalingPolicy& policy, int size) {
  check_policy(policy);
  BatchPlan now = plan_batch(policy.batch, size);
  BatchPlan base = plan_batch(policy.batch, policy.base_size);
  return static_cast<double>(now.global_batch) / static_cast<double>(base.global_batch);
}

double lr_size_factor(const ScalingPolicy& policy, int size) {
  switch (policy.lr_scaling) {
    case LrScaling::kNone:
      return 1.0;
    case LrScaling::kLinear:
      return batch_ratio(policy, size);
    case LrScaling::kSqrt:
      return std::sqrt(batch_ratio(policy, size));
    case LrScaling::kCallback:
      throw InvalidArgument("lr_size_factor: kCallback has no size factor; use target_lr");
  }
  throw InvalidArgument("ScalingPolicy.lr_scaling has an unknown value");
}

double target_lr(const ScalingPolicy& policy, int64_t epoch, int64_t step, int size) {
  check_policy(policy);
  EDL_CHECK(size >= 1, InvalidArgument, "target_lr: world size must be >= 1, got " + std::to_string(size));
  if (policy.lr_scaling == LrScaling::kCallback)
    return checked_lr(policy.lr_callback(epoch, step, size), "ScalingPolicy.lr_callback", size);
  double base = policy.schedule ? checked_lr(policy.schedule(epoch, step), "ScalingPolicy.schedule", size)
                                : policy.base_lr;
  return base * lr_size_factor(policy, size);
}

double warmup_factor(int64_t t, int64_t t0, int warmup_steps, double from) {
  if (warmup_steps <= 0 || from >= 1.0) return 1.0;
  if (t < t0) return from;
  double progress = std::min(1.0, static_cast<double>(t - t0) / warmup_steps);
  return from + (1.0 - from) * progress;
}

double compensation_gamma(int64_t t, int64_t t0, int T, double k) {
  if (t < t0) return 1.0;
  if (t - t0 < T) return 1.0 + static_cast<double>(t - t0) / T * (k - 1.0);
  return k;
}

Rescaler::Rescaler(ScalingPolicy policy) : policy_(std::move(policy)) { check_policy(policy_); }

bool Rescaler::apply_generation(const elastic::GenerationInfo& info) {
  EDL_CHECK(info.size >= 1, InvalidArgument, "GenerationInfo.size must be >= 1, got " + std::to_string(info.size));
  // Already applied in this state. The size is compared too: generation ids restart with a new job
  // incarnation, so a state resumed from a checkpoint may carry the same id with another size.
  if (has_generation_ && info.generation == generation_ && info.size == size_) return false;
  BatchPlan plan = plan_batch(policy_.batch, info.size);
  double target = target_lr(policy_, epoch_, step_, info.size);
  if (!has_generation_) {
    t0_ = step_;
    k_ = 1.0;  // no momentum history to compensate at the first generation
    warmup_from_ = 1.0;
    if (policy_.warmup_at_start && target > 0)
      warmup_from_ = target_lr(policy_, epoch_, step_, policy_.base_size) / target;
  } else if (info.size != size_) {
    double before_target = target_lr(policy_, epoch_, step_, size_);
    double before = before_target * warmup_factor(step_, t0_, policy_.warmup_steps, warmup_from_);
    t0_ = step_;
    warmup_from_ = target > 0 ? before / target : 1.0;
    k_ = (policy_.momentum_compensation && before_target > 0) ? target / before_target : 1.0;
    ++resizes_;
    EDL_LOG(2) << "optim: resize " << size_ << " -> " << info.size << " at step " << step_ << ": lr "
               << before << " -> " << target << (warmup_from_ < 1 && policy_.warmup_steps > 0 ? " (warmup)" : "")
               << ", momentum compensation k=" << k_ << ", local batch " << plan.local_batch << " x "
               << plan.accumulation_steps;
  }
  has_generation_ = true;
  generation_ = info.generation;
  size_ = info.size;
  plan_ = plan;
  return true;
}

StepParams Rescaler::step_params() const {
  EDL_CHECK(has_generation_, InvalidArgument, "Rescaler: no generation applied yet (call apply_generation first)");
  StepParams p;
  p.lr = target_lr(policy_, epoch_, step_, size_) * warmup_factor(step_, t0_, policy_.warmup_steps, warmup_from_);
  int T = policy_.compensation_steps;
  if (k_ != 1.0 && step_ >= t0_ && step_ - t0_ <= T) {
    p.compensating = true;
    p.gamma = compensation_gamma(step_, t0_, T, k_);
    p.prev_gamma = step_ == t0_ ? 1.0 : compensation_gamma(step_ - 1, t0_, T, k_);
  }
  return p;
}

std::string Rescaler::save() {
  std::ostringstream out;
  out << std::hexfloat << "edl-rescaler-v1 " << (has_generation_ ? 1 : 0) << ' ' << generation_ << ' ' << size_ << ' '
      << step_ << ' ' << epoch_ << ' ' << t0_ << ' ' << warmup_from_ << ' ' << k_ << ' ' << resizes_;
  return out.str();
}

void Rescaler::load(const std::string& snapshot) {
  std::istringstream in(snapshot);
  std::string magic;
  int has = 0;
  uint64_t generation = 0;
  int size = 0;
  int64_t step = 0, epoch = 0, t0 = 0, resizes = 0;
  std::string from_s, k_s;
  in >> magic >> has >> generation >> size >> step >> epoch >> t0 >> from_s >> k_s >> resizes;
  EDL_CHECK(in && magic == "edl-rescaler-v1" && (has == 0 || has == 1) && size >= 0 && step >= 0, DataError,
            "Rescaler::load: malformed snapshot (" + std::to_string(snapshot.size()) + " bytes)");
  // std::hexfloat extraction is unreliable across standard libraries; strtod parses hex floats.
  char* end = nullptr;
  double from = std::strtod(from_s.c_str(), &end);
  EDL_CHECK(end && *end == '\0', DataError, "Rescaler::load: malformed warmup factor '" + from_s + "'");
  double k = std::strtod(k_s.c_str(), &end);
  EDL_CHECK(end && *end == '\0', DataError, "Rescaler::load: malformed compensation factor '" + k_s + "'");
  has_generation_ = has == 1;
  generation_ = generation;
  size_ = size;
  step_ = step;
  epoch_ = epoch;
  t0_ = t0;
  warmup_from_ = from;
  k_ = k;
  resizes_ = resizes;
  if (has_generation_) {
    EDL_CHECK(size_ >= 1, DataError, "Rescaler::load: snapshot has size " + std::to_string(size_));
    plan_ = plan_batch(policy_.batch, size_);
  } else {
    plan_ = BatchPlan{};
  }
}

}  // namespace edl::optim
