// Portable 16-float vectors (GCC/Clang vector extensions): one AVX-512 register with -march=native,
// split into narrower registers by the compiler elsewhere. Used by the hand-written kernels.
#pragma once

#include <cstring>

namespace edl::models::simd {

using v16 = float __attribute__((vector_size(64)));

inline v16 load(const float* p) {
  v16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void store(float* p, v16 v) { std::memcpy(p, &v, sizeof(v)); }

// Scalar overloads so kernels templated on the lane type also handle remainder channels.
inline float load1(const float* p) { return *p; }
inline void store1(float* p, float v) { *p = v; }

}  // namespace edl::models::simd
