#include "models/common/activation.h"

#include <algorithm>

#include "edl/error.h"
#include "models/common/parallel.h"

namespace edl::models {

void activation_forward(ActivationKind kind, const float* x, float* y, size_t count) {
  switch (kind) {
    case ActivationKind::kNone:
      if (x != y) std::copy(x, x + count, y);
      break;
    case ActivationKind::kReLU:
#pragma omp simd
      for (size_t i = 0; i < count; ++i) y[i] = std::max(x[i], 0.0f);
      break;
    case ActivationKind::kReLU6:
#pragma omp simd
      for (size_t i = 0; i < count; ++i) y[i] = std::min(std::max(x[i], 0.0f), 6.0f);
      break;
  }
}

void activation_backward(ActivationKind kind, const float* y, const float* dy, float* dx, size_t count) {
  switch (kind) {
    case ActivationKind::kNone:
      if (dx != dy) std::copy(dy, dy + count, dx);
      break;
    case ActivationKind::kReLU:
#pragma omp simd
      for (size_t i = 0; i < count; ++i) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
      break;
    case ActivationKind::kReLU6:
#pragma omp simd
      for (size_t i = 0; i < count; ++i) dx[i] = (y[i] > 0.0f && y[i] < 6.0f) ? dy[i] : 0.0f;
      break;
  }
}

const Tensor& Activation::forward(const Tensor& in, int threads) {
  out_.reshape(in.shape());
  const size_t per = in.shape().image_size();
  run_chunks(threads, in.shape().n, [&](int, int b, int e) {
    activation_forward(kind_, in.image(b), out_.image(b), per * (e - b));
  });
  return out_;
}

void Activation::backward(const Tensor& dout, Tensor* dx, int threads) {
  if (dout.shape() != out_.shape()) throw InvalidArgument("Activation: output gradient has the wrong shape");
  dx->reshape(out_.shape());
  const size_t per = out_.shape().image_size();
  run_chunks(threads, out_.shape().n, [&](int, int b, int e) {
    activation_backward(kind_, out_.image(b), dout.image(b), dx->image(b), per * (e - b));
  });
}

}  // namespace edl::models
