// DepthwiseConv2d: per-channel k x k convolution without bias (groups == channels) on NHWC
// activations. Weight layout weight[kh][kw][c]; the inner loops run along the contiguous channel
// dimension, so they vectorise for any stride and padding.
//
// Thread-safety: one forward/backward at a time per layer. forward() keeps a pointer to its input,
// which must stay alive and unchanged until backward() returns.
#pragma once

#include <string>
#include <vector>

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

  const Tensor& forward(const Tensor& in, int threads);
  // Writes weight().grad, calls ready(weight().index), then writes the input gradient into *dx when
  // dx is not null.
  void backward(const Tensor& dout, Tensor* dx, int threads, const GradReadyFn& ready);

  const Tensor& output() const { return out_; }

 private:
  std::string name_;
  DepthwiseConv2dOptions opt_;
  Parameter weight_;
  const Tensor* in_ = nullptr;
  Tensor out_;
  std::vector<FloatBuffer> dw_partial_;
};

}  // namespace edl::models
