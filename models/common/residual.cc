#include "models/common/residual.h"

#include "edl/error.h"
#include "models/common/parallel.h"

namespace edl::models {

const Tensor& ResidualAdd::forward(const Tensor& main, const Tensor& shortcut, int threads) {
  const Shape ms = main.shape(), ss = shortcut.shape();
  const int s = opt_.stride, pad = opt_.pad_channels;
  if (ms.n != ss.n || ms.c != ss.c + 2 * pad || ms.h != (ss.h + s - 1) / s || ms.w != (ss.w + s - 1) / s) {
    throw InvalidArgument("ResidualAdd: branch and shortcut shapes do not match");
  }
  shortcut_shape_ = ss;
  out_.reshape(ms);
  run_chunks(threads, ms.n, [&](int, int b, int e) {
    for (int n = b; n < e; ++n) {
      const float* a = main.image(n);
      const float* x = shortcut.image(n);
      float* o = out_.image(n);
      if (s == 1 && pad == 0) {
        const size_t count = ms.image_size();
#pragma omp simd
        for (size_t i = 0; i < count; ++i) o[i] = a[i] + x[i];
      } else {
        for (int y = 0; y < ms.h; ++y) {
          for (int xx = 0; xx < ms.w; ++xx) {
            const size_t op = (static_cast<size_t>(y) * ms.w + xx) * ms.c;
            const float* xi = x + (static_cast<size_t>(y) * s * ss.w + static_cast<size_t>(xx) * s) * ss.c;
            for (int ch = 0; ch < ms.c; ++ch) {
              int src = ch - pad;
              o[op + ch] = a[op + ch] + (src >= 0 && src < ss.c ? xi[src] : 0.0f);
            }
          }
        }
      }
      activation_forward(opt_.activation, o, o, ms.image_size());
    }
  });
  return out_;
}

void ResidualAdd::backward(const Tensor& dout, Tensor* dmain, int threads, const BlockHook& dmain_hook) {
  if (dout.shape() != out_.shape()) throw InvalidArgument("ResidualAdd: output gradient has the wrong shape");
  dmain->reshape(out_.shape());
  const size_t per = out_.shape().image_size();
  run_chunks(threads, out_.shape().n, [&](int tid, int b, int e) {
    for (int n = b; n < e; ++n) {
      activation_backward(opt_.activation, out_.image(n), dout.image(n), dmain->image(n), per);
      if (dmain_hook) dmain_hook(tid, n, n + 1);
    }
  });
}

void ResidualAdd::add_shortcut_grad(const Tensor& dmain, Tensor* dx, int threads) const {
  const Shape ms = dmain.shape(), ss = shortcut_shape_;
  if (dx->shape() != ss) throw InvalidArgument("ResidualAdd: shortcut gradient has the wrong shape");
  const int s = opt_.stride, pad = opt_.pad_channels;
  run_chunks(threads, ms.n, [&](int, int b, int e) {
    for (int n = b; n < e; ++n) {
      const float* g = dmain.image(n);
      float* d = dx->image(n);
      if (s == 1 && pad == 0) {
        const size_t count = ms.image_size();
#pragma omp simd
        for (size_t i = 0; i < count; ++i) d[i] += g[i];
        continue;
      }
      for (int y = 0; y < ms.h; ++y) {
        for (int xx = 0; xx < ms.w; ++xx) {
          const float* gi = g + (static_cast<size_t>(y) * ms.w + xx) * ms.c + pad;
          float* di = d + (static_cast<size_t>(y) * s * ss.w + static_cast<size_t>(xx) * s) * ss.c;
          for (int ch = 0; ch < ss.c; ++ch) di[ch] += gi[ch];
        }
      }
    }
  });
}

}  // namespace edl::models
