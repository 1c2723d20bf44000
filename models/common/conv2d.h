// Conv2d: 2-D convolution without bias on NHWC activations, forward and backward.
//
// Weight layout is HWIO: weight[kh][kw][ci][co], so a convolution is the row-major GEMM
//   out[pixels, co] = im2col(in)[pixels, kh*kw*ci] * weight[kh*kw*ci, co].
// 1x1 stride-1 convolutions skip im2col (the NHWC input already is the left operand). 3x3 stride-1
// convolutions with padding 1 use Winograd F(2x2,3x3) for the forward pass and the input gradient
// (see winograd.h); everything else uses im2col over small blocks of images so operands stay in cache.
// Threads split the batch into contiguous image ranges; weight gradients are summed per thread and
// reduced at the end.
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

struct Conv2dOptions {
  int in_channels = 0;
  int out_channels = 0;
  int kernel = 3;   // square kernel
  int stride = 1;
  int padding = 1;
  bool winograd = true;  // use Winograd F(2x2,3x3) where it applies (3x3, stride 1, padding 1)
};

class Conv2d {
 public:
  Conv2d(std::string name, Conv2dOptions options);

  Parameter& weight() { return weight_; }
  const Conv2dOptions& options() const { return opt_; }
  Shape output_shape(const Shape& in) const;
  // Multiply-accumulates of one forward pass over one image of `in` (for FLOP accounting).
  double macs_per_image(const Shape& in) const;

  // out_hook, when set, runs on the worker threads after each block of output images is written.
  const Tensor& forward(const Tensor& in, int threads, const BlockHook& out_hook = {});
  // Writes weight().grad and, when dx is not null, the input gradient into *dx (reshaped to the
  // input's shape), calling dx_hook after each block of images; then calls ready(weight().index).
  // Both gradients are computed in one parallel region (one barrier per layer).
  void backward(const Tensor& dout, Tensor* dx, int threads, const GradReadyFn& ready,
                const BlockHook& dx_hook = {});

  const Tensor& output() const { return out_; }

 private:
  bool is_pointwise() const { return opt_.kernel == 1 && opt_.stride == 1 && opt_.padding == 0; }
  bool use_winograd() const;
  int block_images(const Shape& in) const;
  void im2col(const float* img, const Shape& in, float* col) const;
  void col2im(const float* col, const Shape& in, float* img) const;
  void prepare_scratch(int threads, size_t per_thread);

  std::string name_;
  Conv2dOptions opt_;
  Parameter weight_;
  const Tensor* in_ = nullptr;
  Tensor out_;
  std::vector<FloatBuffer> scratch_;     // per thread: im2col / Winograd buffers
  std::vector<FloatBuffer> dw_partial_;  // per thread weight-gradient sums
  FloatBuffer flipped_;                  // weight rotated 180 degrees, ci <-> co swapped
  FloatBuffer winograd_weight_;          // transformed weights (forward) [16][ci][co]
  FloatBuffer winograd_weight_t_;        // transformed flipped weights (input gradient) [16][co][ci]
};

}  // namespace edl::models
