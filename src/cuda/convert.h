// The per-element work of the device kernels: loading and storing each DataType through its
// arithmetic type (the 16-bit conversions are common/float16.h's, libedl's own), and the
// post-operation of an unpack or a pack (average, scale). Written for the host and the device:
// cuda_kernels.cu runs it on the GPU, tests/cuda/convert_test.cc checks it on the CPU.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "common/float16.h"

namespace edl::cuda::convert {

using float16::bfloat16_to_float;
using float16::float_to_bfloat16;
using float16::float_to_half;
using float16::half_to_float;

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
