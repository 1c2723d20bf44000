#include "optim/batch_check.h"

#include <algorithm>

namespace edl::optim::detail {
namespace {

std::string advice(const BatchPlan& plan) {
  return "; the LR scaling, the accumulation split and the fp16 pre-scaling assume the policy's " +
         std::to_string(plan.local_batch) + " at " + std::to_string(plan.size) +
         " worker(s). Make them agree: ScalingPolicy::batch.local_batch (kFixedLocal, default 32) = the shard "
         "generator's ShardOptions::batch_size, or ShardOptions::batch_for_size = [&](int size) { return "
         "edl::optim::plan_batch(policy.batch, size).local_batch; } (docs/optim.md, \"Batch plan\")";
}

}  // namespace

std::string BatchCheck::observe(uint64_t samples, const BatchPlan& plan, uint64_t generation) {
  if (warned_ || samples == 0 || plan.local_batch <= 0) return "";
  if (!started_ || generation != generation_) {
    started_ = true;
    generation_ = generation;
    steps_ = 0;
    largest_ = 0;
  }
  ++steps_;
  largest_ = std::max(largest_, samples);
  const auto planned = static_cast<uint64_t>(plan.local_batch);
  std::string what;
  if (samples > planned) {
    what = "a step of this worker trains " + std::to_string(samples) + " samples (set_step_samples) but the scaling "
           "policy plans a local batch of " + std::to_string(planned);
  } else if (steps_ >= kSteps && largest_ < planned) {
    what = "the last " + std::to_string(steps_) + " non-empty steps of this worker trained at most " +
           std::to_string(largest_) + " samples each (set_step_samples) but the scaling policy plans a local batch of " +
           std::to_string(planned);
  } else {
    return "";
  }
  warned_ = true;
  return "edl: DistributedOptimizer: " + what + advice(plan);
}

}  // namespace edl::optim::detail
