#include "models/common/batch_norm.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "edl/error.h"
#include "models/common/parallel.h"

namespace edl::models {
namespace {

// Masked output gradient of the fused activation for one pixel row of c channels.
inline float masked(ActivationKind kind, float y, float dy) {
  switch (kind) {
    case ActivationKind::kReLU:
      return y > 0.0f ? dy : 0.0f;
    case ActivationKind::kReLU6:
      return (y > 0.0f && y < 6.0f) ? dy : 0.0f;
    case ActivationKind::kNone:
      break;
  }
  return dy;
}

inline float activate(ActivationKind kind, float v) {
  switch (kind) {
    case ActivationKind::kReLU:
      return std::max(v, 0.0f);
    case ActivationKind::kReLU6:
      return std::min(std::max(v, 0.0f), 6.0f);
    case ActivationKind::kNone:
      break;
  }
  return v;
}

template <ActivationKind kAct>
void affine(const float* __restrict x, float* __restrict y, size_t pixels, int c, const float* __restrict scale,
            const float* __restrict shift) {
  for (size_t p = 0; p < pixels; ++p) {
    const float* __restrict xi = x + p * c;
    float* __restrict yi = y + p * c;
#pragma omp simd
    for (int ch = 0; ch < c; ++ch) yi[ch] = activate(kAct, xi[ch] * scale[ch] + shift[ch]);
  }
}

template <ActivationKind kAct>
using Kind = std::integral_constant<ActivationKind, kAct>;

// Calls fn(Kind<k>{}) for the runtime activation k, so kernels are compiled once per activation.
template <typename F>
void dispatch(ActivationKind k, F&& fn) {
  switch (k) {
    case ActivationKind::kNone:
      fn(Kind<ActivationKind::kNone>{});
      break;
    case ActivationKind::kReLU:
      fn(Kind<ActivationKind::kReLU>{});
      break;
    case ActivationKind::kReLU6:
      fn(Kind<ActivationKind::kReLU6>{});
      break;
  }
}

// sum[c] = sum over pixels of x, sq[c] = sum of x^2 (one image: float accumulation is enough).
void channel_sums(const float* __restrict x, size_t pixels, int c, float* __restrict sum, float* __restrict sq) {
  std::fill(sum, sum + c, 0.0f);
  std::fill(sq, sq + c, 0.0f);
  for (size_t p = 0; p < pixels; ++p) {
    const float* __restrict xi = x + p * c;
#pragma omp simd
    for (int ch = 0; ch < c; ++ch) {
      sum[ch] += xi[ch];
      sq[ch] += xi[ch] * xi[ch];
    }
  }
}

// sg[c] = sum of g, sgx[c] = sum of g * (x - mean), g = masked output gradient.
template <ActivationKind kAct>
void grad_sums(const float* __restrict x, const float* __restrict y, const float* __restrict dy, size_t pixels,
               int c, const float* __restrict mean, float* __restrict sg, float* __restrict sgx) {
  std::fill(sg, sg + c, 0.0f);
  std::fill(sgx, sgx + c, 0.0f);
  for (size_t p = 0; p < pixels; ++p) {
    const size_t o = p * c;
#pragma omp simd
    for (int ch = 0; ch < c; ++ch) {
      float g = masked(kAct, y[o + ch], dy[o + ch]);
      sg[ch] += g;
      sgx[ch] += g * (x[o + ch] - mean[ch]);
    }
  }
}

// dx = scale * (g - k1 - (x - mean) * k2).
template <ActivationKind kAct>
void input_grad_train(const float* __restrict x, const float* __restrict y, const float* __restrict dy,
                      float* __restrict dx, size_t pixels, int c, const float* __restrict scale,
                      const float* __restrict mean, const float* __restrict k1, const float* __restrict k2) {
  for (size_t p = 0; p < pixels; ++p) {
    const size_t o = p * c;
#pragma omp simd
    for (int ch = 0; ch < c; ++ch) {
      float g = masked(kAct, y[o + ch], dy[o + ch]);
      dx[o + ch] = scale[ch] * (g - k1[ch] - (x[o + ch] - mean[ch]) * k2[ch]);
    }
  }
}

template <ActivationKind kAct>
void input_grad_eval(const float* __restrict y, const float* __restrict dy, float* __restrict dx, size_t pixels,
                     int c, const float* __restrict scale) {
  for (size_t p = 0; p < pixels; ++p) {
    const size_t o = p * c;
#pragma omp simd
    for (int ch = 0; ch < c; ++ch) dx[o + ch] = scale[ch] * masked(kAct, y[o + ch], dy[o + ch]);
  }
}

}  // namespace

BatchNorm2d::BatchNorm2d(std::string name, BatchNormOptions options) : name_(std::move(name)), opt_(options) {
  if (opt_.channels <= 0) throw InvalidArgument("BatchNorm2d " + name_ + ": channels must be positive");
  const size_t c = opt_.channels;
  gamma_.name = name_ + ".weight";
  beta_.name = name_ + ".bias";
  gamma_.allocate(c);
  beta_.allocate(c);
  std::fill(gamma_.value.data(), gamma_.value.data() + c, 1.0f);
  running_mean_.name = name_ + ".running_mean";
  running_var_.name = name_ + ".running_var";
  running_mean_.value.resize(c);
  running_var_.value.resize(c);
  running_mean_.value.zero();
  std::fill(running_var_.value.data(), running_var_.value.data() + c, 1.0f);
  mean_.resize(c);
  invstd_.resize(c);
  scale_.resize(c);
  shift_.resize(c);
}

void BatchNorm2d::reset_partials(int threads) {
  const int c = opt_.channels;
  partial_.resize(threads);
  image_sums_.resize(threads);
  for (int t = 0; t < threads; ++t) {
    partial_[t].assign(2 * c, 0.0);
    image_sums_[t].resize(2 * c);
  }
}

void BatchNorm2d::add_input_stats(const Tensor& x, int tid, int b, int e) {
  const int c = opt_.channels;
  const size_t pixels = static_cast<size_t>(x.shape().h) * x.shape().w;
  std::vector<double>& acc = partial_[tid];
  float* sums = image_sums_[tid].data();
  for (int n = b; n < e; ++n) {
    channel_sums(x.image(n), pixels, c, sums, sums + c);
    for (int ch = 0; ch < 2 * c; ++ch) acc[ch] += sums[ch];
  }
}

void BatchNorm2d::add_grad_stats(const Tensor& dy, int tid, int b, int e) {
  const int c = opt_.channels;
  const size_t pixels = static_cast<size_t>(dy.shape().h) * dy.shape().w;
  std::vector<double>& acc = partial_[tid];
  float* sums = image_sums_[tid].data();
  for (int n = b; n < e; ++n) {
    dispatch(opt_.activation, [&](auto kind) {
      grad_sums<decltype(kind)::value>(in_->image(n), out_.image(n), dy.image(n), pixels, c, mean_.data(), sums,
                                       sums + c);
    });
    for (int ch = 0; ch < 2 * c; ++ch) acc[ch] += sums[ch];
  }
}

BlockHook BatchNorm2d::input_stats_hook(const Tensor& x, int threads) {
  reset_partials(std::max(1, threads));
  fused_input_ = &x;
  return [this, &x](int tid, int b, int e) { add_input_stats(x, tid, b, e); };
}

BlockHook BatchNorm2d::grad_stats_hook(const Tensor& dy, int threads) {
  if (in_ == nullptr) throw InvalidArgument("BatchNorm2d " + name_ + ": grad_stats_hook() before forward()");
  reset_partials(std::max(1, threads));
  fused_grad_ = &dy;
  return [this, &dy](int tid, int b, int e) { add_grad_stats(dy, tid, b, e); };
}

const Tensor& BatchNorm2d::forward(const Tensor& in, bool train, int threads) {
  const Shape s = in.shape();
  if (s.c != opt_.channels) {
    throw InvalidArgument("BatchNorm2d " + name_ + ": input has " + std::to_string(s.c) + " channels, expected " +
                          std::to_string(opt_.channels));
  }
  in_ = &in;
  train_ = train;
  out_.reshape(s);
  const int c = s.c;
  const size_t pixels = static_cast<size_t>(s.h) * s.w;
  const int nt = clamp_threads(threads, s.n);
  const float* gamma = gamma_.value.data();
  const float* beta = beta_.value.data();
  float* rm = running_mean_.value.data();
  float* rv = running_var_.value.data();

  if (train) {
    if (fused_input_ != &in) {
      reset_partials(nt);
      run_chunks(nt, s.n, [&](int tid, int b, int e) { add_input_stats(in, tid, b, e); });
    }
    fused_input_ = nullptr;
    const double m = static_cast<double>(s.n) * pixels;
    for (int ch = 0; ch < c; ++ch) {
      double s1 = 0, s2 = 0;
      for (const std::vector<double>& part : partial_) {
        s1 += part[ch];
        s2 += part[c + ch];
      }
      double mean = s1 / m;
      double var = std::max(0.0, s2 / m - mean * mean);
      mean_[ch] = static_cast<float>(mean);
      invstd_[ch] = static_cast<float>(1.0 / std::sqrt(var + opt_.eps));
      double unbiased = m > 1 ? var * m / (m - 1) : var;
      rm[ch] = static_cast<float>((1.0 - opt_.momentum) * rm[ch] + opt_.momentum * mean);
      rv[ch] = static_cast<float>((1.0 - opt_.momentum) * rv[ch] + opt_.momentum * unbiased);
    }
  } else {
    fused_input_ = nullptr;
    for (int ch = 0; ch < c; ++ch) {
      mean_[ch] = rm[ch];
      invstd_[ch] = 1.0f / std::sqrt(rv[ch] + opt_.eps);
    }
  }
  for (int ch = 0; ch < c; ++ch) {
    scale_[ch] = gamma[ch] * invstd_[ch];
    shift_[ch] = beta[ch] - mean_[ch] * scale_[ch];
  }
  run_chunks(nt, s.n, [&](int, int b, int e) {
    const size_t px = pixels * (e - b);
    switch (opt_.activation) {
      case ActivationKind::kNone:
        affine<ActivationKind::kNone>(in.image(b), out_.image(b), px, c, scale_.data(), shift_.data());
        break;
      case ActivationKind::kReLU:
        affine<ActivationKind::kReLU>(in.image(b), out_.image(b), px, c, scale_.data(), shift_.data());
        break;
      case ActivationKind::kReLU6:
        affine<ActivationKind::kReLU6>(in.image(b), out_.image(b), px, c, scale_.data(), shift_.data());
        break;
    }
  });
  return out_;
}

void BatchNorm2d::backward(const Tensor& dout, Tensor* dx, int threads, const GradReadyFn& ready) {
  if (in_ == nullptr) throw InvalidArgument("BatchNorm2d " + name_ + ": backward() before forward()");
  const Tensor& in = *in_;
  const Shape s = in.shape();
  if (dout.shape() != s) throw InvalidArgument("BatchNorm2d " + name_ + ": output gradient has the wrong shape");
  const int c = s.c;
  const size_t pixels = static_cast<size_t>(s.h) * s.w;
  const int nt = clamp_threads(threads, s.n);
  const ActivationKind act = opt_.activation;
  // Pass 1 (unless a hook did it): sum(g) and sum(g * (x - mean)) per channel, g = masked dout.
  if (fused_grad_ != &dout) {
    reset_partials(nt);
    run_chunks(nt, s.n, [&](int tid, int b, int e) { add_grad_stats(dout, tid, b, e); });
  }
  fused_grad_ = nullptr;
  float* dgamma = gamma_.grad.data();
  float* dbeta = beta_.grad.data();
  std::vector<float> k1(c), k2(c);
  const float m = static_cast<float>(static_cast<double>(s.n) * pixels);
  for (int ch = 0; ch < c; ++ch) {
    double s1 = 0, s2 = 0;
    for (const std::vector<double>& part : partial_) {
      s1 += part[ch];
      s2 += part[c + ch];
    }
    dbeta[ch] = static_cast<float>(s1);
    dgamma[ch] = static_cast<float>(s2 * invstd_[ch]);
    // dx = scale * (g - dbeta / m - x_hat * dgamma / m), x_hat = (x - mean) * invstd.
    k1[ch] = dbeta[ch] / m;
    k2[ch] = dgamma[ch] * invstd_[ch] / m;
  }
  if (ready) {
    ready(beta_.index);
    ready(gamma_.index);
  }
  if (dx == nullptr) return;
  dx->reshape(s);
  const bool train = train_;
  run_chunks(nt, s.n, [&](int, int b, int e) {
    const size_t px = pixels * (e - b);
    dispatch(act, [&](auto kind) {
      constexpr ActivationKind kAct = decltype(kind)::value;
      if (train) {
        input_grad_train<kAct>(in.image(b), out_.image(b), dout.image(b), dx->image(b), px, c, scale_.data(),
                               mean_.data(), k1.data(), k2.data());
      } else {
        input_grad_eval<kAct>(out_.image(b), dout.image(b), dx->image(b), px, c, scale_.data());
      }
    });
  });
}

}  // namespace edl::models
