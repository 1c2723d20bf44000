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
  if (plan.local_batch <= 0) return "";
  const auto planned = static_cast<uint64_t>(plan.local_batch);
  return judge(samples, planned, generation, plan, "this worker",
               " (set_step_samples) but the scaling policy plans a local batch of " + std::to_string(planned));
}

std::string BatchCheck::observe_global(uint64_t total, const BatchPlan& plan, uint64_t generation) {
  if (plan.local_batch <= 0 || plan.size <= 0) return "";
  const auto planned = static_cast<uint64_t>(plan.local_batch) * static_cast<uint64_t>(plan.size);
  return judge(total, planned, generation, plan, "the job",
               " over its " + std::to_string(plan.size) +
                   " worker(s) (the sum of their set_step_samples, which straggler rebalancing splits unevenly) but "
                   "the scaling policy plans " + std::to_string(plan.size) + " x a local batch of " +
                   std::to_string(plan.local_batch) + " = " + std::to_string(planned));
}

// The verdict on one step of `samples` records against `planned`: "a step of <subject> trains N
// samples<tail>" or "the last K non-empty steps of <subject> trained at most N samples each<tail>".
std::string BatchCheck::judge(uint64_t samples, uint64_t planned, uint64_t generation, const BatchPlan& plan,
                              const std::string& subject, const std::string& tail) {
  if (warned_ || samples == 0) return "";
  if (!started_ || generation != generation_) {
    started_ = true;
    generation_ = generation;
    steps_ = 0;
    largest_ = 0;
  }
  ++steps_;
  largest_ = std::max(largest_, samples);
  std::string what;
  if (samples > planned) {
    what = "a step of " + subject + " trains " + std::to_string(samples) + " samples" + tail;
  } else if (steps_ >= kSteps && largest_ < planned) {
    what = "the last " + std::to_string(steps_) + " non-empty steps of " + subject + " trained at most " +
           std::to_string(largest_) + " samples each" + tail;
  } else {
    return "";
  }
  warned_ = true;
  return "edl: DistributedOptimizer: " + what + advice(plan);
}

}  // namespace edl::optim::detail
