#include "models/common/conv2d.h"

#include <algorithm>
#include <cstring>

#include "edl/error.h"
#include "models/common/gemm.h"
#include "models/common/parallel.h"
#include "models/common/winograd.h"

namespace edl::models {
namespace {

// Working-set targets per thread: an im2col block stays within ~L2/4, a Winograd block within ~L2/2.
constexpr size_t kIm2colBytes = 512 * 1024;
constexpr size_t kWinogradBytes = 1024 * 1024;

}  // namespace

Conv2d::Conv2d(std::string name, Conv2dOptions options) : name_(std::move(name)), opt_(options) {
  if (opt_.in_channels <= 0 || opt_.out_channels <= 0 || opt_.kernel <= 0 || opt_.stride <= 0 ||
      opt_.padding < 0) {
    throw InvalidArgument("Conv2d " + name_ + ": channels, kernel and stride must be positive, padding >= 0");
  }
  weight_.name = name_ + ".weight";
  weight_.allocate(static_cast<size_t>(opt_.kernel) * opt_.kernel * opt_.in_channels * opt_.out_channels);
}

Shape Conv2d::output_shape(const Shape& in) const {
  if (in.c != opt_.in_channels) {
    throw InvalidArgument("Conv2d " + name_ + ": input has " + std::to_string(in.c) + " channels, expected " +
                          std::to_string(opt_.in_channels));
  }
  int oh = (in.h + 2 * opt_.padding - opt_.kernel) / opt_.stride + 1;
  int ow = (in.w + 2 * opt_.padding - opt_.kernel) / opt_.stride + 1;
  if (oh <= 0 || ow <= 0) throw InvalidArgument("Conv2d " + name_ + ": input smaller than the kernel");
  return {in.n, oh, ow, opt_.out_channels};
}

double Conv2d::macs_per_image(const Shape& in) const {
  Shape o = output_shape(in);
  return static_cast<double>(o.h) * o.w * o.c * opt_.kernel * opt_.kernel * opt_.in_channels;
}

bool Conv2d::use_winograd() const {
  return opt_.winograd && opt_.kernel == 3 && opt_.stride == 1 && opt_.padding == 1;
}

int Conv2d::block_images(const Shape& in) const {
  Shape o = output_shape(in);
  size_t bytes;
  if (use_winograd()) {
    bytes = 16 * sizeof(float) * static_cast<size_t>(winograd::tiles(o.h, o.w)) *
            (opt_.in_channels + opt_.out_channels);
    bytes = std::max<size_t>(1, bytes);
    return static_cast<int>(std::max<size_t>(1, kWinogradBytes / bytes));
  }
  bytes = sizeof(float) * static_cast<size_t>(o.h) * o.w * opt_.kernel * opt_.kernel *
          std::max(opt_.in_channels, opt_.out_channels);
  return static_cast<int>(std::max<size_t>(1, kIm2colBytes / bytes));
}

void Conv2d::prepare_scratch(int threads, size_t per_thread) {
  if (static_cast<int>(scratch_.size()) < threads) scratch_.resize(threads);
  for (int t = 0; t < threads; ++t) scratch_[t].resize(per_thread);
}

void Conv2d::im2col(const float* img, const Shape& in, float* col) const {
  const int k = opt_.kernel, s = opt_.stride, p = opt_.padding, c = in.c;
  Shape o = output_shape(in);
  const size_t row = static_cast<size_t>(k) * k * c;
  for (int oy = 0; oy < o.h; ++oy) {
    for (int ox = 0; ox < o.w; ++ox) {
      float* dst = col + (static_cast<size_t>(oy) * o.w + ox) * row;
      for (int ky = 0; ky < k; ++ky) {
        int y = oy * s - p + ky;
        for (int kx = 0; kx < k; ++kx, dst += c) {
          int x = ox * s - p + kx;
          if (y < 0 || y >= in.h || x < 0 || x >= in.w) {
            std::memset(dst, 0, sizeof(float) * c);
          } else {
            std::memcpy(dst, img + (static_cast<size_t>(y) * in.w + x) * c, sizeof(float) * c);
          }
        }
      }
    }
  }
}

void Conv2d::col2im(const float* col, const Shape& in, float* img) const {
  const int k = opt_.kernel, s = opt_.stride, p = opt_.padding, c = in.c;
  Shape o = output_shape(in);
  const size_t row = static_cast<size_t>(k) * k * c;
  std::memset(img, 0, sizeof(float) * in.image_size());
  for (int oy = 0; oy < o.h; ++oy) {
    for (int ox = 0; ox < o.w; ++ox) {
      const float* src = col + (static_cast<size_t>(oy) * o.w + ox) * row;
      for (int ky = 0; ky < k; ++ky) {
        int y = oy * s - p + ky;
        for (int kx = 0; kx < k; ++kx, src += c) {
          int x = ox * s - p + kx;
          if (y < 0 || y >= in.h || x < 0 || x >= in.w) continue;
          float* dst = img + (static_cast<size_t>(y) * in.w + x) * c;
          for (int ch = 0; ch < c; ++ch) dst[ch] += src[ch];
        }
      }
    }
  }
}

const Tensor& Conv2d::forward(const Tensor& in, int threads, const BlockHook& out_hook) {
  const Shape is = in.shape();
  const Shape os = output_shape(is);
  in_ = &in;
  out_.reshape(os);
  const int ci = opt_.in_channels, co = opt_.out_channels, kk = opt_.kernel * opt_.kernel;
  const size_t rows = static_cast<size_t>(os.h) * os.w;
  const int nt = clamp_threads(threads, is.n);
  const int block = block_images(is);
  const float* w = weight_.value.data();

  if (is_pointwise()) {
    run_chunks(nt, is.n, [&](int tid, int b, int e) {
      for (int i = b; i < e; i += block) {
        int nb = std::min(block, e - i);
        gemm(Trans::kNo, Trans::kNo, static_cast<int>(nb * rows), co, ci, in.image(i), ci, w, co, out_.image(i), co,
             false);
        if (out_hook) out_hook(tid, i, i + nb);
      }
    });
  } else if (use_winograd()) {
    winograd_weight_.resize(16 * static_cast<size_t>(ci) * co);
    winograd::transform_weight(w, ci, co, winograd_weight_.data());
    prepare_scratch(nt, winograd::scratch_floats(block, os.h, os.w, ci, co));
    run_chunks(nt, is.n, [&](int tid, int b, int e) {
      for (int i = b; i < e; i += block) {
        int nb = std::min(block, e - i);
        winograd::conv3x3(in.image(i), nb, is.h, is.w, ci, co, winograd_weight_.data(), out_.image(i),
                          scratch_[tid].data());
        if (out_hook) out_hook(tid, i, i + nb);
      }
    });
  } else {
    const size_t krow = static_cast<size_t>(kk) * ci;
    prepare_scratch(nt, block * rows * krow);
    run_chunks(nt, is.n, [&](int tid, int b, int e) {
      float* col = scratch_[tid].data();
      for (int i = b; i < e; i += block) {
        int nb = std::min(block, e - i);
        for (int j = 0; j < nb; ++j) im2col(in.image(i + j), is, col + j * rows * krow);
        gemm(Trans::kNo, Trans::kNo, static_cast<int>(nb * rows), co, static_cast<int>(krow), col,
             static_cast<int>(krow), w, co, out_.image(i), co, false);
        if (out_hook) out_hook(tid, i, i + nb);
      }
    });
  }
  return out_;
}

void Conv2d::backward(const Tensor& dout, Tensor* dx, int threads, const GradReadyFn& ready,
                      const BlockHook& dx_hook) {
  if (in_ == nullptr) throw InvalidArgument("Conv2d " + name_ + ": backward() before forward()");
  const Tensor& in = *in_;
  const Shape is = in.shape();
  const Shape os = output_shape(is);
  if (dout.shape() != os) throw InvalidArgument("Conv2d " + name_ + ": output gradient has the wrong shape");
  const int ci = opt_.in_channels, co = opt_.out_channels, kk = opt_.kernel * opt_.kernel;
  const size_t rows = static_cast<size_t>(os.h) * os.w;
  const size_t krow = static_cast<size_t>(kk) * ci;
  const int nt = clamp_threads(threads, is.n);
  const float* w = weight_.value.data();
  const size_t wcount = weight_.count();
  const bool winograd_dx = dx != nullptr && use_winograd();

  if (static_cast<int>(dw_partial_.size()) < nt) dw_partial_.resize(nt);
  for (int t = 0; t < nt; ++t) dw_partial_[t].resize(wcount);
  const int block = is_pointwise() ? block_images(is)
                                   : std::max(1, static_cast<int>(kIm2colBytes / (sizeof(float) * rows * krow)));
  const int wblock = block_images(is);
  size_t scratch = is_pointwise() ? 0 : block * rows * krow;
  if (winograd_dx) {
    // dx = conv3x3(dout, weight rotated by 180 degrees with ci and co swapped).
    flipped_.resize(wcount);
    for (int ky = 0; ky < 3; ++ky)
      for (int kx = 0; kx < 3; ++kx)
        for (int a = 0; a < ci; ++a)
          for (int o = 0; o < co; ++o)
            flipped_.data()[((static_cast<size_t>(ky) * 3 + kx) * co + o) * ci + a] =
                w[((static_cast<size_t>(2 - ky) * 3 + (2 - kx)) * ci + a) * co + o];
    winograd_weight_t_.resize(16 * static_cast<size_t>(ci) * co);
    winograd::transform_weight(flipped_.data(), co, ci, winograd_weight_t_.data());
    scratch = std::max(scratch, winograd::scratch_floats(wblock, is.h, is.w, co, ci));
  }
  prepare_scratch(nt, scratch);
  if (dx != nullptr) dx->reshape(is);

  // One parallel region per backward: each thread sums the weight gradient of its images, then
  // writes their input gradient.
  run_chunks(nt, is.n, [&](int tid, int b, int e) {
    float* dw = dw_partial_[tid].data();
    float* col = scratch_[tid].data();
    // 1. Weight gradient: dW[k*k*ci, co] = sum over pixels of im2col(in)^T * dout.
    if (is_pointwise()) {
      gemm(Trans::kYes, Trans::kNo, ci, co, static_cast<int>((e - b) * rows), in.image(b), ci, dout.image(b), co,
           dw, co, false);
    } else {
      for (int i = b; i < e; i += block) {
        int nb = std::min(block, e - i);
        for (int j = 0; j < nb; ++j) im2col(in.image(i + j), is, col + j * rows * krow);
        gemm(Trans::kYes, Trans::kNo, static_cast<int>(krow), co, static_cast<int>(nb * rows), col,
             static_cast<int>(krow), dout.image(i), co, dw, co, i != b);
      }
    }
    if (dx == nullptr) return;
    // 2. Input gradient.
    if (is_pointwise()) {
      for (int i = b; i < e; i += block) {
        int nb = std::min(block, e - i);
        gemm(Trans::kNo, Trans::kYes, static_cast<int>(nb * rows), ci, co, dout.image(i), co, w, co, dx->image(i), ci,
             false);
        if (dx_hook) dx_hook(tid, i, i + nb);
      }
    } else if (winograd_dx) {
      for (int i = b; i < e; i += wblock) {
        int nb = std::min(wblock, e - i);
        winograd::conv3x3(dout.image(i), nb, is.h, is.w, co, ci, winograd_weight_t_.data(), dx->image(i), col);
        if (dx_hook) dx_hook(tid, i, i + nb);
      }
    } else {
      for (int i = b; i < e; i += block) {
        int nb = std::min(block, e - i);
        gemm(Trans::kNo, Trans::kYes, static_cast<int>(nb * rows), static_cast<int>(krow), co, dout.image(i), co,
             w, co, col, static_cast<int>(krow), false);
        for (int j = 0; j < nb; ++j) col2im(col + j * rows * krow, is, dx->image(i + j));
        if (dx_hook) dx_hook(tid, i, i + nb);
      }
    }
  });
  float* g = weight_.grad.data();
  std::memcpy(g, dw_partial_[0].data(), sizeof(float) * wcount);
  for (int t = 1; t < nt; ++t) {
    const float* p = dw_partial_[t].data();
    for (size_t e = 0; e < wcount; ++e) g[e] += p[e];
  }
  if (ready) ready(weight_.index);
}

}  // namespace edl::models
