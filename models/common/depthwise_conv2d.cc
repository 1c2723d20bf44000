#include "models/common/depthwise_conv2d.h"

#include <algorithm>
#include <cstring>

#include "edl/error.h"
#include "models/common/parallel.h"

namespace edl::models {

DepthwiseConv2d::DepthwiseConv2d(std::string name, DepthwiseConv2dOptions options)
    : name_(std::move(name)), opt_(options) {
  if (opt_.channels <= 0 || opt_.kernel <= 0 || opt_.stride <= 0 || opt_.padding < 0) {
    throw InvalidArgument("DepthwiseConv2d " + name_ + ": channels, kernel and stride must be positive");
  }
  weight_.name = name_ + ".weight";
  weight_.allocate(static_cast<size_t>(opt_.kernel) * opt_.kernel * opt_.channels);
}

Shape DepthwiseConv2d::output_shape(const Shape& in) const {
  if (in.c != opt_.channels) {
    throw InvalidArgument("DepthwiseConv2d " + name_ + ": input has " + std::to_string(in.c) +
                          " channels, expected " + std::to_string(opt_.channels));
  }
  int oh = (in.h + 2 * opt_.padding - opt_.kernel) / opt_.stride + 1;
  int ow = (in.w + 2 * opt_.padding - opt_.kernel) / opt_.stride + 1;
  if (oh <= 0 || ow <= 0) throw InvalidArgument("DepthwiseConv2d " + name_ + ": input smaller than the kernel");
  return {in.n, oh, ow, in.c};
}

double DepthwiseConv2d::macs_per_image(const Shape& in) const {
  Shape o = output_shape(in);
  return static_cast<double>(o.h) * o.w * o.c * opt_.kernel * opt_.kernel;
}

const Tensor& DepthwiseConv2d::forward(const Tensor& in, int threads, const BlockHook& out_hook) {
  const Shape is = in.shape();
  const Shape os = output_shape(is);
  in_ = &in;
  out_.reshape(os);
  const float* w = weight_.value.data();
  run_chunks(threads, is.n, [&](int tid, int b, int e) {
    for (int n = b; n < e; ++n) {
      const float* src = in.image(n);
      float* dst = out_.image(n);
      forward_image(src, w, dst, is, os);
      if (out_hook) out_hook(tid, n, n + 1);
    }
  });
  return out_;
}

void DepthwiseConv2d::forward_image(const float* src, const float* w, float* dst, const Shape& is,
                                    const Shape& os) const {
  const int k = opt_.kernel, s = opt_.stride, p = opt_.padding, c = is.c;
  for (int oy = 0; oy < os.h; ++oy) {
    for (int ox = 0; ox < os.w; ++ox) {
      float* o = dst + (static_cast<size_t>(oy) * os.w + ox) * c;
      std::fill(o, o + c, 0.0f);
      for (int ky = 0; ky < k; ++ky) {
        int y = oy * s - p + ky;
        if (y < 0 || y >= is.h) continue;
        for (int kx = 0; kx < k; ++kx) {
          int x = ox * s - p + kx;
          if (x < 0 || x >= is.w) continue;
          const float* i = src + (static_cast<size_t>(y) * is.w + x) * c;
          const float* wk = w + (static_cast<size_t>(ky) * k + kx) * c;
#pragma omp simd
          for (int ch = 0; ch < c; ++ch) o[ch] += i[ch] * wk[ch];
        }
      }
    }
  }
}

void DepthwiseConv2d::backward(const Tensor& dout, Tensor* dx, int threads, const GradReadyFn& ready,
                               const BlockHook& dx_hook) {
  if (in_ == nullptr) throw InvalidArgument("DepthwiseConv2d " + name_ + ": backward() before forward()");
  const Tensor& in = *in_;
  const Shape is = in.shape();
  const Shape os = output_shape(is);
  if (dout.shape() != os) throw InvalidArgument("DepthwiseConv2d " + name_ + ": output gradient has the wrong shape");
  const int k = opt_.kernel, s = opt_.stride, p = opt_.padding, c = is.c;
  const float* w = weight_.value.data();
  const size_t wcount = weight_.count();
  const int nt = clamp_threads(threads, is.n);
  if (static_cast<int>(dw_partial_.size()) < nt) dw_partial_.resize(nt);
  for (int t = 0; t < nt; ++t) {
    dw_partial_[t].resize(wcount);
    dw_partial_[t].zero();
  }
  if (dx != nullptr) dx->reshape(is);
  // One pass computes both gradients: each output pixel scatters into its k x k input window.
  run_chunks(nt, is.n, [&](int tid, int b, int e) {
    float* dw = dw_partial_[tid].data();
    for (int n = b; n < e; ++n) {
      const float* src = in.image(n);
      const float* g = dout.image(n);
      float* di = dx != nullptr ? dx->image(n) : nullptr;
      if (di != nullptr) std::memset(di, 0, sizeof(float) * is.image_size());
      for (int oy = 0; oy < os.h; ++oy) {
        for (int ox = 0; ox < os.w; ++ox) {
          const float* go = g + (static_cast<size_t>(oy) * os.w + ox) * c;
          for (int ky = 0; ky < k; ++ky) {
            int y = oy * s - p + ky;
            if (y < 0 || y >= is.h) continue;
            for (int kx = 0; kx < k; ++kx) {
              int x = ox * s - p + kx;
              if (x < 0 || x >= is.w) continue;
              const size_t off = (static_cast<size_t>(y) * is.w + x) * c;
              const float* i = src + off;
              float* dwk = dw + (static_cast<size_t>(ky) * k + kx) * c;
#pragma omp simd
              for (int ch = 0; ch < c; ++ch) dwk[ch] += i[ch] * go[ch];
              if (di != nullptr) {
                const float* wk = w + (static_cast<size_t>(ky) * k + kx) * c;
                float* d = di + off;
#pragma omp simd
                for (int ch = 0; ch < c; ++ch) d[ch] += wk[ch] * go[ch];
              }
            }
          }
        }
      }
      if (di != nullptr && dx_hook) dx_hook(tid, n, n + 1);
    }
  });
  float* gw = weight_.grad.data();
  std::memcpy(gw, dw_partial_[0].data(), sizeof(float) * wcount);
  for (int t = 1; t < nt; ++t) {
    const float* q = dw_partial_[t].data();
    for (size_t i = 0; i < wcount; ++i) gw[i] += q[i];
  }
  if (ready) ready(weight_.index);
}

}  // namespace edl::models
