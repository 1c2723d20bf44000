// Linear: y[n, o] = x[n, :] * weight[:, o] + bias[o] on inputs flattened to [N, features].
// Weight layout is [in_features][out_features] ("<name>.weight"), then "<name>.bias".
//
// Thread-safety: one forward/backward at a time per layer. forward() keeps a pointer to its input,
// which must stay alive and unchanged until backward() returns.
#pragma once

#include <string>

#include "models/common/parameter.h"
#include "models/common/tensor.h"

namespace edl::models {

class Linear {
 public:
  Linear(std::string name, int in_features, int out_features);

  Parameter& weight() { return weight_; }
  Parameter& bias() { return bias_; }

  const Tensor& forward(const Tensor& in, int threads);
  // Writes bias().grad and weight().grad, reports them (bias first), then the input gradient.
  void backward(const Tensor& dout, Tensor* dx, int threads, const GradReadyFn& ready);
  const Tensor& output() const { return out_; }

 private:
  std::string name_;
  int in_, out_features_;
  Parameter weight_, bias_;
  const Tensor* in_tensor_ = nullptr;
  Tensor out_;
};

}  // namespace edl::models
