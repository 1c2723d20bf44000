// The per-element update rules of DistributedOptimizer (docs/optim.md has the formulas).
//
// Every kernel reads the reduced gradient SUM from `grad` and multiplies it by `grad_scale`
// (1 / (size * passes), or 1 when the gradient was pre-scaled for fp16 compression).
// Thread-safety: pure functions over the caller's arrays.
#pragma once

#include <cstddef>

namespace edl::optim::detail {

struct SgdStep {
  float lr = 0;
  float momentum = 0;
  float weight_decay = 0;
  bool nesterov = false;
  float grad_scale = 1;
  // Momentum compensation (Lin et al. 2019, eq. 5-6): before the momentum update, v += comp_delta * s
  // where s = mu^(t - t0) v_{t0} is the decayed pre-resize buffer (then s *= mu). comp == nullptr: none.
  float comp_delta = 0;
};

// w, v: parameter and velocity (v-form: v accumulates lr * g); comp: the compensation buffer or null.
void sgd_update(float* w, float* v, float* comp, const float* grad, size_t n, const SgdStep& s);

struct AdamStep {
  float lr = 0;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0;
  bool decoupled = false;  // AdamW
  float grad_scale = 1;
  float bias_correction1 = 1;  // 1 - beta1^t
  float bias_correction2 = 1;  // 1 - beta2^t
};

void adam_update(float* w, float* m, float* v, const float* grad, size_t n, const AdamStep& s);

}  // namespace edl::optim::detail
