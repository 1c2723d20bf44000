// BatchCheck: does the batch a worker really trains match the local batch the scaling policy plans?
//
// The LR policy, the gradient-accumulation split (max_local_batch), the global-batch cap
// (max_global_batch) and the fp16 pre-scaling of a weighted step all assume that every worker trains
// the policy's local batch (BatchPolicy::local_batch, default 32, or global_batch / size), while the
// records come from elsewhere (edl::data::ShardOptions::batch_size / batch_for_size). The optimizer
// sees the records a step trains only through set_step_samples(n), so it judges from those counts,
// per membership generation (the plan changes with the size):
//   - a step with more records than planned: the batches are larger than the plan (at once);
//   - kSteps non-empty steps of one generation, none of them as large as planned: the batches are
//     smaller (a shard's or an epoch's last batch may be short, empty steps are ignored, and a full
//     batch among kSteps ends the doubt).
// The first verdict is returned once (the optimizer logs it); later ones are not.
// With straggler rebalancing (EDL_REBALANCE_STRAGGLERS, edl-run --rebalance-stragglers) the workers'
// batches differ by design (a slow worker trains fewer records, a fast one more; docs/data.md), so a
// worker's own count says nothing: the optimizer judges the step's sum over the workers instead
// (observe_global, after the allreduce) against size x the planned local batch, by the same rules.
//
// Thread-safety: used by the optimizer's training thread only.
#pragma once

#include <cstdint>
#include <string>

#include "edl/export.h"
#include "edl/optim/rescale.h"

namespace edl::optim::detail {

class EDL_API BatchCheck {  // exported for tests/optim/batch_check_test.cc
 public:
  static constexpr int kSteps = 8;

  // One weighted step of `samples` records at generation `generation` whose plan is `plan`. Returns
  // the warning to log (naming both numbers and how to make them agree), or "" when there is none or
  // it was given before.
  std::string observe(uint64_t samples, const BatchPlan& plan, uint64_t generation);
  // The same for the step's records summed over the plan's `size` workers (`total`), against
  // size x the planned local batch: the check under straggler rebalancing.
  std::string observe_global(uint64_t total, const BatchPlan& plan, uint64_t generation);

 private:
  std::string judge(uint64_t samples, uint64_t planned, uint64_t generation, const BatchPlan& plan,
                    const std::string& subject, const std::string& tail);

  bool warned_ = false;
  bool started_ = false;
  uint64_t generation_ = 0;
  int steps_ = 0;         // non-empty steps observed in this generation
  uint64_t largest_ = 0;  // the largest of them
};

}  // namespace edl::optim::detail
