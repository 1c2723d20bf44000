// Elementwise activations: ReLU and ReLU6, forward and backward.
//
// Backward uses the forward *output* y (ReLU: y > 0; ReLU6: 0 < y < 6), so a layer that fuses an
// activation (batch norm, residual add) keeps only its output. Gradients at the kinks are 0.
//
// Thread-safety: pure functions on caller-owned memory; the Activation layer is used by one thread.
#pragma once

#include <cstddef>

#include "models/common/tensor.h"

namespace edl::models {

enum class ActivationKind { kNone, kReLU, kReLU6 };

// y = act(x); y may alias x.
void activation_forward(ActivationKind kind, const float* x, float* y, size_t count);
// dx = dy * act'(from y); dx may alias dy.
void activation_backward(ActivationKind kind, const float* y, const float* dy, float* dx, size_t count);

// A standalone activation layer (the reference models fuse activations into batch norm / residual add).
class Activation {
 public:
  explicit Activation(ActivationKind kind) : kind_(kind) {}
  const Tensor& forward(const Tensor& in, int threads);
  void backward(const Tensor& dout, Tensor* dx, int threads);
  const Tensor& output() const { return out_; }

 private:
  ActivationKind kind_;
  Tensor out_;
};

}  // namespace edl::models
