// ResidualAdd: out = act(main + shortcut(x)), the join of a residual block.
//
// The shortcut is the identity, or ResNet's parameter-free "option A" projection: spatial
// subsampling by `stride` (x[:, ::s, ::s, :]) and `pad_channels` zero channels on each side of the
// channel dimension (He et al. 2016, CIFAR ResNets; the variant with 269,722 parameters in ResNet20).
//
// Thread-safety: one forward/backward at a time per layer.
#pragma once

#include "models/common/activation.h"
#include "models/common/parallel.h"
#include "models/common/tensor.h"

namespace edl::models {

struct ResidualOptions {
  ActivationKind activation = ActivationKind::kNone;
  int stride = 1;        // option-A subsampling of the shortcut
  int pad_channels = 0;  // zero channels added before and after the shortcut's channels
};

class ResidualAdd {
 public:
  explicit ResidualAdd(ResidualOptions options = {}) : opt_(options) {}

  const Tensor& forward(const Tensor& main, const Tensor& shortcut, int threads);
  // *dmain = act'(out) * dout: the gradient of both branches' outputs; dmain_hook runs after each image.
  void backward(const Tensor& dout, Tensor* dmain, int threads, const BlockHook& dmain_hook = {});
  // Adds the shortcut's input gradient for branch-output gradient `dmain` to *dx (same shape as the
  // shortcut input).
  void add_shortcut_grad(const Tensor& dmain, Tensor* dx, int threads) const;

  const Tensor& output() const { return out_; }

 private:
  ResidualOptions opt_;
  Shape shortcut_shape_;
  Tensor out_;
};

}  // namespace edl::models
