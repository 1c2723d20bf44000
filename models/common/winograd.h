// Winograd F(2x2, 3x3) for 3x3 stride-1 padding-1 convolutions on NHWC images (Lavin & Gray 2016).
//
// Each 2x2 output tile needs 16 multiplies per (ci, co) pair instead of 36: a 4x4 input tile d is
// transformed to V = B^T d B, the weights to U = G g G^T, the 16 elementwise products become 16
// independent GEMMs over (tiles x ci) * (ci x co), and the output tile is Y = A^T M A. The transforms
// vectorise along the contiguous channel dimension. Tiles past odd image edges read zeros and write
// only the valid outputs, so any H, W >= 1 works.
//
// Thread-safety: pure functions on caller-owned memory.
#pragma once

#include <cstddef>

namespace edl::models::winograd {

// Tiles per image for an h x w output.
inline int tiles(int h, int w) { return ((h + 1) / 2) * ((w + 1) / 2); }

// weight[3][3][ci][co] (HWIO) -> u[16][ci][co].
void transform_weight(const float* weight, int ci, int co, float* u);

// Floats of scratch that conv3x3() needs for `images` images.
size_t scratch_floats(int images, int h, int w, int ci, int co);

// out[images][h][w][co] = conv3x3(in[images][h][w][ci], u) with stride 1 and zero padding 1.
// If accumulate, adds to out instead of overwriting it.
void conv3x3(const float* in, int images, int h, int w, int ci, int co, const float* u, float* out,
             float* scratch, bool accumulate = false);

}  // namespace edl::models::winograd
