// BatchNorm2d over NHWC activations with an optional fused activation (ReLU / ReLU6).
//
// Training mode normalises with the batch statistics (biased variance) and updates the running mean
// and running variance (unbiased, PyTorch convention: r = (1 - momentum) * r + momentum * batch);
// eval mode normalises with the running statistics. The running statistics are buffers
// ("<name>.running_mean", "<name>.running_var") so the elastic state can save and broadcast them.
// Parameters: "<name>.weight" (gamma, init 1) and "<name>.bias" (beta, init 0).
//
// Thread-safety: one forward/backward at a time per layer. forward() keeps a pointer to its input,
// which must stay alive and unchanged until backward() returns.
#pragma once

#include <string>
#include <vector>

#include "models/common/activation.h"
#include "models/common/parallel.h"
#include "models/common/parameter.h"
#include "models/common/tensor.h"

namespace edl::models {

struct BatchNormOptions {
  int channels = 0;
  float eps = 1e-5f;
  float momentum = 0.1f;
  ActivationKind activation = ActivationKind::kNone;  // applied after the affine transform
};

class BatchNorm2d {
 public:
  BatchNorm2d(std::string name, BatchNormOptions options);

  Parameter& weight() { return gamma_; }
  Parameter& bias() { return beta_; }
  Buffer& running_mean() { return running_mean_; }
  Buffer& running_var() { return running_var_; }

  // Fusion hooks (see BlockHook). input_stats_hook(x) returns a hook that accumulates the batch
  // statistics of x, the tensor the next train-mode forward(x) will normalise, while its producer
  // writes it; that forward then skips its own statistics pass. grad_stats_hook(dy) does the same
  // for the two gradient reductions of the next backward(dy). Every image must pass through the
  // hook exactly once before the consuming call.
  BlockHook input_stats_hook(const Tensor& x, int threads);
  BlockHook grad_stats_hook(const Tensor& dy, int threads);

  const Tensor& forward(const Tensor& in, bool train, int threads);
  // Writes bias().grad and weight().grad, reports them (bias first: reverse registration order), then
  // writes the input gradient into *dx when dx is not null.
  void backward(const Tensor& dout, Tensor* dx, int threads, const GradReadyFn& ready);

  const Tensor& output() const { return out_; }

 private:
  std::string name_;
  BatchNormOptions opt_;
  Parameter gamma_, beta_;
  Buffer running_mean_, running_var_;
  const Tensor* in_ = nullptr;
  Tensor out_;
  bool train_ = false;
  std::vector<float> mean_, invstd_, scale_, shift_;
  void reset_partials(int threads);
  void add_input_stats(const Tensor& x, int tid, int b, int e);
  void add_grad_stats(const Tensor& dy, int tid, int b, int e);

  std::vector<std::vector<double>> partial_;  // per thread: 2 * channels sums
  std::vector<std::vector<float>> image_sums_;  // per thread scratch: 2 * channels
  const Tensor* fused_input_ = nullptr;  // statistics of this tensor were accumulated by a hook
  const Tensor* fused_grad_ = nullptr;
};

}  // namespace edl::models
