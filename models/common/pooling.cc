#include "models/common/pooling.h"

#include <algorithm>

#include "edl/error.h"
#include "models/common/parallel.h"

namespace edl::models {

const Tensor& GlobalAvgPool::forward(const Tensor& in, int threads) {
  const Shape s = in.shape();
  in_shape_ = s;
  out_.reshape({s.n, 1, 1, s.c});
  const size_t pixels = static_cast<size_t>(s.h) * s.w;
  const float inv = 1.0f / static_cast<float>(pixels);
  run_chunks(threads, s.n, [&](int, int b, int e) {
    for (int n = b; n < e; ++n) {
      const float* x = in.image(n);
      float* o = out_.image(n);
      std::fill(o, o + s.c, 0.0f);
      for (size_t p = 0; p < pixels; ++p) {
#pragma omp simd
        for (int ch = 0; ch < s.c; ++ch) o[ch] += x[p * s.c + ch];
      }
      for (int ch = 0; ch < s.c; ++ch) o[ch] *= inv;
    }
  });
  return out_;
}

void GlobalAvgPool::backward(const Tensor& dout, Tensor* dx, int threads) {
  const Shape s = in_shape_;
  if (dout.shape() != out_.shape()) throw InvalidArgument("GlobalAvgPool: output gradient has the wrong shape");
  dx->reshape(s);
  const size_t pixels = static_cast<size_t>(s.h) * s.w;
  const float inv = 1.0f / static_cast<float>(pixels);
  run_chunks(threads, s.n, [&](int, int b, int e) {
    for (int n = b; n < e; ++n) {
      const float* g = dout.image(n);
      float* d = dx->image(n);
      for (size_t p = 0; p < pixels; ++p) {
#pragma omp simd
        for (int ch = 0; ch < s.c; ++ch) d[p * s.c + ch] = g[ch] * inv;
      }
    }
  });
}

}  // namespace edl::models
