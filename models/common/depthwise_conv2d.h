// DepthwiseConv2d: per-channel k x k convolution without bias (groups == channels) on NHWC
// activations. Weight layout weight[kh][kw][c]; the inner loops run along the contiguous channel
// dimension, so they vectorise for any stride and padding.
//
// Both passes loop over pixels with the whole channel vector innermost; the backward pass scatters
// each output pixel's gradient into its k x k input window and weight-gradient rows.
//
// Thread-safety: one forward/backward at a time per layer. forward() keeps a pointer to its input,
// which must stay alive and unchanged until backward() returns.
#pragma once

#include <string>
#include <vector>

#include "models/common/parallel.h"
#include "models/common/parameter.h"
#include "models/common/tensor.h"

namespace edl::models {

struct DepthwiseConv2dOptions {
  int channels = 0;
  int kernel = 3;
  int stride = 1;
  int padding = 1;
};

class DepthwiseConv2d {
 public:
  DepthwiseConv2d(std::string name, DepthwiseConv2dOptions options);

  Parameter& weight() { return weight_; }
  Shape output_shape(const Shape& in) const;
  double macs_per_image(const Shape& in) const;

  // out_hook / dx_hook: see Conv2d (called after each image).
  const Tensor& forward(const Tensor& in, int threads, const BlockHook& out_hook = {});
  // Writes weight().grad and, when dx is not null, the input gradient into *dx; then calls
  // ready(weight().index).
  void backward(const Tensor& dout, Tensor* dx, int threads, const GradReadyFn& ready,
                const BlockHook& dx_hook = {});

  const Tensor& output() const { return out_; }

 private:
  void forward_image(const float* src, const float* w, float* dst, const Shape& is, const Shape& os) const;

  std::string name_;
  DepthwiseConv2dOptions opt_;
  Parameter weight_;
  const Tensor* in_ = nullptr;
  Tensor out_;
  std::vector<FloatBuffer> dw_partial_;
};

}  // namespace edl::models
