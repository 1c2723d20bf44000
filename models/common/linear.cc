#include "models/common/linear.h"

#include "edl/error.h"
#include "models/common/gemm.h"

namespace edl::models {

Linear::Linear(std::string name, int in_features, int out_features)
    : name_(std::move(name)), in_(in_features), out_features_(out_features) {
  if (in_ <= 0 || out_features_ <= 0) throw InvalidArgument("Linear " + name_ + ": feature counts must be positive");
  weight_.name = name_ + ".weight";
  bias_.name = name_ + ".bias";
  weight_.allocate(static_cast<size_t>(in_) * out_features_);
  bias_.allocate(out_features_);
}

const Tensor& Linear::forward(const Tensor& in, int threads) {
  const Shape s = in.shape();
  if (static_cast<int>(s.image_size()) != in_) {
    throw InvalidArgument("Linear " + name_ + ": input has " + std::to_string(s.image_size()) +
                          " features, expected " + std::to_string(in_));
  }
  in_tensor_ = &in;
  out_.reshape({s.n, 1, 1, out_features_});
  // Tiny GEMM (batch x features x classes): one thread is enough.
  float* y = out_.data();
  const float* b = bias_.value.data();
  for (int n = 0; n < s.n; ++n)
    for (int o = 0; o < out_features_; ++o) y[static_cast<size_t>(n) * out_features_ + o] = b[o];
  gemm(Trans::kNo, Trans::kNo, s.n, out_features_, in_, in.data(), in_, weight_.value.data(), out_features_, y,
       out_features_, true);
  return out_;
}

void Linear::backward(const Tensor& dout, Tensor* dx, int threads, const GradReadyFn& ready) {
  if (in_tensor_ == nullptr) throw InvalidArgument("Linear " + name_ + ": backward() before forward()");
  const Tensor& in = *in_tensor_;
  const int n = in.shape().n;
  if (dout.shape() != out_.shape()) throw InvalidArgument("Linear " + name_ + ": output gradient has the wrong shape");
  float* db = bias_.grad.data();
  for (int o = 0; o < out_features_; ++o) db[o] = 0.0f;
  for (int i = 0; i < n; ++i)
    for (int o = 0; o < out_features_; ++o) db[o] += dout.data()[static_cast<size_t>(i) * out_features_ + o];
  gemm(Trans::kYes, Trans::kNo, in_, out_features_, n, in.data(), in_, dout.data(), out_features_,
       weight_.grad.data(), out_features_, false);
  if (ready) {
    ready(bias_.index);
    ready(weight_.index);
  }
  if (dx == nullptr) return;
  dx->reshape(in.shape());
  gemm(Trans::kNo, Trans::kYes, n, in_, out_features_, dout.data(), out_features_, weight_.value.data(),
       out_features_, dx->data(), in_, false);
}

}  // namespace edl::models
