#include "optim/update.h"

#include <cmath>

namespace edl::optim::detail {

void sgd_update(float* w, float* v, float* comp, const float* grad, size_t n, const SgdStep& s) {
  const float lr = s.lr, mu = s.momentum, wd = s.weight_decay, scale = s.grad_scale;
  if (v == nullptr) {  // momentum 0: plain SGD
    for (size_t i = 0; i < n; ++i) w[i] -= lr * (grad[i] * scale + wd * w[i]);
    return;
  }
  if (comp != nullptr) {
    const float delta = s.comp_delta;
    for (size_t i = 0; i < n; ++i) {
      v[i] += delta * comp[i];
      comp[i] *= mu;
    }
  }
  if (s.nesterov) {
    for (size_t i = 0; i < n; ++i) {
      float g = grad[i] * scale + wd * w[i];
      float vi = mu * v[i] + lr * g;
      v[i] = vi;
      w[i] -= mu * vi + lr * g;
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      float g = grad[i] * scale + wd * w[i];
      float vi = mu * v[i] + lr * g;
      v[i] = vi;
      w[i] -= vi;
    }
  }
}

void adam_update(float* w, float* m, float* v, const float* grad, size_t n, const AdamStep& s) {
  const float b1 = s.beta1, b2 = s.beta2, scale = s.grad_scale, wd = s.weight_decay;
  const float step_size = s.lr / s.bias_correction1;
  const float inv_sqrt_bc2 = 1.0f / std::sqrt(s.bias_correction2);
  const float decay = s.decoupled ? 1.0f - s.lr * wd : 1.0f;
  const float l2 = s.decoupled ? 0.0f : wd;
  for (size_t i = 0; i < n; ++i) {
    float wi = w[i] * decay;
    float g = grad[i] * scale + l2 * w[i];
    float mi = b1 * m[i] + (1.0f - b1) * g;
    float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    w[i] = wi - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + s.eps);
  }
}

}  // namespace edl::optim::detail
