#include "models/common/winograd.h"

#include <algorithm>
#include <vector>

#include "models/common/gemm.h"

namespace edl::models::winograd {
namespace {

// V = B^T d B for one 4x4 tile of c channels; rows[i][j] point at the c channels of input pixel (i, j)
// of the tile (a zero row for padding). Writes v[k * stride + ch] for k = 4 * i + j.
void input_tile(const float* const rows[4][4], int c, float* v, size_t stride) {
#pragma omp simd
  for (int ch = 0; ch < c; ++ch) {
    float d[4][4];
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) d[i][j] = rows[i][j][ch];
    // t = B^T d: rows combine as (d0 - d2, d1 + d2, d2 - d1, d1 - d3).
    float t[4][4];
    for (int j = 0; j < 4; ++j) {
      t[0][j] = d[0][j] - d[2][j];
      t[1][j] = d[1][j] + d[2][j];
      t[2][j] = d[2][j] - d[1][j];
      t[3][j] = d[1][j] - d[3][j];
    }
    for (int i = 0; i < 4; ++i) {
      v[(4 * i + 0) * stride + ch] = t[i][0] - t[i][2];
      v[(4 * i + 1) * stride + ch] = t[i][1] + t[i][2];
      v[(4 * i + 2) * stride + ch] = t[i][2] - t[i][1];
      v[(4 * i + 3) * stride + ch] = t[i][1] - t[i][3];
    }
  }
}

// Y = A^T M A for one tile: m[k * stride + ch]; out[i][j] is the output pixel (or a scratch sink past
// the image edge).
template <bool kAccumulate>
void output_tile(const float* m, size_t stride, int c, float* const out[2][2]) {
#pragma omp simd
  for (int ch = 0; ch < c; ++ch) {
    float x[4][4];
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) x[i][j] = m[(4 * i + j) * stride + ch];
    float t[2][4];
    for (int j = 0; j < 4; ++j) {
      t[0][j] = x[0][j] + x[1][j] + x[2][j];
      t[1][j] = x[1][j] - x[2][j] - x[3][j];
    }
    float y[2][2];
    for (int i = 0; i < 2; ++i) {
      y[i][0] = t[i][0] + t[i][1] + t[i][2];
      y[i][1] = t[i][1] - t[i][2] - t[i][3];
    }
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j)
        out[i][j][ch] = kAccumulate ? out[i][j][ch] + y[i][j] : y[i][j];
  }
}

}  // namespace

void transform_weight(const float* weight, int ci, int co, float* u) {
  const size_t plane = static_cast<size_t>(ci) * co;
  for (size_t e = 0; e < plane; ++e) {
    float g[3][3];
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) g[i][j] = weight[(3 * i + j) * plane + e];
    // t = G g (4x3), then U = t G^T (4x4); G = [[1,0,0],[.5,.5,.5],[.5,-.5,.5],[0,0,1]].
    float t[4][3];
    for (int j = 0; j < 3; ++j) {
      t[0][j] = g[0][j];
      t[1][j] = 0.5f * (g[0][j] + g[1][j] + g[2][j]);
      t[2][j] = 0.5f * (g[0][j] - g[1][j] + g[2][j]);
      t[3][j] = g[2][j];
    }
    for (int i = 0; i < 4; ++i) {
      u[(4 * i + 0) * plane + e] = t[i][0];
      u[(4 * i + 1) * plane + e] = 0.5f * (t[i][0] + t[i][1] + t[i][2]);
      u[(4 * i + 2) * plane + e] = 0.5f * (t[i][0] - t[i][1] + t[i][2]);
      u[(4 * i + 3) * plane + e] = t[i][2];
    }
  }
}

size_t scratch_floats(int images, int h, int w, int ci, int co) {
  size_t t = static_cast<size_t>(images) * tiles(h, w);
  return 16 * t * (ci + co) + 2 * static_cast<size_t>(std::max(ci, co)) + 16;
}

void conv3x3(const float* in, int images, int h, int w, int ci, int co, const float* u, float* out,
             float* scratch, bool accumulate) {
  const int th = (h + 1) / 2, tw = (w + 1) / 2;
  const size_t nt = static_cast<size_t>(images) * th * tw;
  float* v = scratch;                 // [16][nt][ci]
  float* m = v + 16 * nt * ci;        // [16][nt][co]
  float* zero = m + 16 * nt * co;     // ci zeros for padding
  float* sink = zero + std::max(ci, co);  // where outputs past the image edge go
  std::fill(zero, zero + std::max(ci, co), 0.0f);
  const size_t vstride = nt * ci, mstride = nt * co;

  size_t tile = 0;
  for (int img = 0; img < images; ++img) {
    const float* base = in + static_cast<size_t>(img) * h * w * ci;
    for (int ty = 0; ty < th; ++ty) {
      for (int tx = 0; tx < tw; ++tx, ++tile) {
        const float* rows[4][4];
        for (int i = 0; i < 4; ++i) {
          int y = 2 * ty - 1 + i;
          for (int j = 0; j < 4; ++j) {
            int x = 2 * tx - 1 + j;
            rows[i][j] = (y >= 0 && y < h && x >= 0 && x < w) ? base + (static_cast<size_t>(y) * w + x) * ci
                                                               : zero;
          }
        }
        input_tile(rows, ci, v + tile * ci, vstride);
      }
    }
  }
  const size_t plane = static_cast<size_t>(ci) * co;
  for (int k = 0; k < 16; ++k) {
    gemm(Trans::kNo, Trans::kNo, static_cast<int>(nt), co, ci, v + k * vstride, ci, u + k * plane, co,
         m + k * mstride, co, false);
  }
  tile = 0;
  for (int img = 0; img < images; ++img) {
    float* base = out + static_cast<size_t>(img) * h * w * co;
    for (int ty = 0; ty < th; ++ty) {
      for (int tx = 0; tx < tw; ++tx, ++tile) {
        float* dst[2][2];
        for (int i = 0; i < 2; ++i) {
          int y = 2 * ty + i;
          for (int j = 0; j < 2; ++j) {
            int x = 2 * tx + j;
            dst[i][j] = (y < h && x < w) ? base + (static_cast<size_t>(y) * w + x) * co : sink;
          }
        }
        if (accumulate) {
          output_tile<true>(m + tile * co, mstride, co, dst);
        } else {
          output_tile<false>(m + tile * co, mstride, co, dst);
        }
      }
    }
  }
}

}  // namespace edl::models::winograd
