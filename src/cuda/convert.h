// Element conversions of the device kernels (float16 / bfloat16 <-> float32, round to nearest even)
// and the per-element post-operation of an unpack (average, scale), written once for the host and
// the device: cuda_kernels.cu runs them on the GPU, tests/cuda/convert_test.cc checks them on the
// CPU against libedl's own conversions (edl/types.h), so that the device path rounds exactly as the
// host path does.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define EDL_HD __host__ __device__ __forceinline__
#else
#define EDL_HD inline
#endif

namespace edl::cuda::convert {

EDL_HD float bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
#endif
}

EDL_HD uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  return u;
#endif
}

EDL_HD float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  return bits_to_float(bits);
}

EDL_HD uint16_t float_to_half(float f) {
  const uint32_t x = float_to_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (absx < 0x38800000u) {                                             // subnormal or zero in half
    if (absx < 0x33000000u) return static_cast<uint16_t>(sign);          // rounds to zero
    const uint32_t e = absx >> 23;
    const uint32_t m = (absx & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;
    uint32_t res = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (res & 1u))) ++res;
    return static_cast<uint16_t>(sign | res);
  }
  uint32_t res = (absx - 0x38000000u) >> 13;
  const uint32_t rem = absx & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (res & 1u))) ++res;
  return static_cast<uint16_t>(sign | res);
}

EDL_HD float bfloat16_to_float(uint16_t b) { return bits_to_float(static_cast<uint32_t>(b) << 16); }

EDL_HD uint16_t float_to_bfloat16(float f) {
  const uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN stays NaN
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

// Storage tags for the two 16-bit float types (both stored as uint16_t).
struct F16 {};
struct BF16 {};

// Loads element i as its arithmetic type (float for the 16-bit types) and stores one back.
template <typename Tag>
struct Storage;
template <>
struct Storage<F16> {
  using Bits = uint16_t;
  using Math = float;
  EDL_HD static float load(uint16_t v) { return half_to_float(v); }
  EDL_HD static uint16_t store(float v) { return float_to_half(v); }
};
template <>
struct Storage<BF16> {
  using Bits = uint16_t;
  using Math = float;
  EDL_HD static float load(uint16_t v) { return bfloat16_to_float(v); }
  EDL_HD static uint16_t store(float v) { return float_to_bfloat16(v); }
};
template <typename T>
struct Plain {
  using Bits = T;
  using Math = T;
  EDL_HD static T load(T v) { return v; }
  EDL_HD static T store(T v) { return v; }
};
template <> struct Storage<float> : Plain<float> {};
template <> struct Storage<double> : Plain<double> {};
template <> struct Storage<int32_t> : Plain<int32_t> {};
template <> struct Storage<int64_t> : Plain<int64_t> {};
template <> struct Storage<uint8_t> : Plain<uint8_t> {};

// The post-operation of an unpack or a pack, on the arithmetic value: divide by `divisor` (an
// average; integers truncate, as the host path's divide_inplace) or multiply by `scale` (the
// compression prescale). divisor 1 and scale 1 leave the value alone.
template <typename M>
EDL_HD M post(M v, int divisor, float scale) {
  if (divisor != 1) v = v / static_cast<M>(divisor);
  if (scale != 1.0f) v = static_cast<M>(v * static_cast<M>(scale));
  return v;
}

// One element from storage type In to storage type Out, through In's arithmetic type.
template <typename In, typename Out>
EDL_HD typename Storage<Out>::Bits convert_one(typename Storage<In>::Bits v, int divisor, float scale) {
  using M = typename Storage<In>::Math;
  const M x = post<M>(Storage<In>::load(v), divisor, scale);
  return Storage<Out>::store(static_cast<typename Storage<Out>::Math>(x));
}

}  // namespace edl::cuda::convert
