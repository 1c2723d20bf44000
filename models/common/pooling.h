// GlobalAvgPool: [N, H, W, C] -> [N, 1, 1, C], the mean over all pixels of each channel.
//
// Thread-safety: one forward/backward at a time per layer.
#pragma once

#include "models/common/tensor.h"

namespace edl::models {

class GlobalAvgPool {
 public:
  const Tensor& forward(const Tensor& in, int threads);
  // dx[n, y, x, c] = dout[n, c] / (H * W).
  void backward(const Tensor& dout, Tensor* dx, int threads);
  const Tensor& output() const { return out_; }

 private:
  Shape in_shape_;
  Tensor out_;
};

}  // namespace edl::models
