// Element types and reduction operations of EDL collectives.
//
// Collectives take pointer + count + DataType (no templates in the algorithms). float16 and bfloat16
// are stored as 16-bit values and accumulate in float32 inside reductions.
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "edl/export.h"

namespace edl {

enum class DataType : uint8_t {
  kFloat32 = 0,
  kFloat64 = 1,
  kInt32 = 2,
  kInt64 = 3,
  kFloat16 = 4,
  kBFloat16 = 5,
  kUInt8 = 6,  // raw bytes (broadcast / allgather of blobs; not reducible except by sum/min/max)
};

enum class ReduceOp : uint8_t {
  kSum = 0,
  kAverage = 1,
  kMin = 2,
  kMax = 3,
  kProduct = 4,
};

// Size in bytes of one element.
EDL_API size_t dtype_size(DataType t);
EDL_API const char* dtype_name(DataType t);
EDL_API const char* op_name(ReduceOp op);

// 16-bit storage types; conversions are round-to-nearest-even.
struct Half {
  uint16_t bits = 0;
};
struct BFloat16 {
  uint16_t bits = 0;
};
EDL_API float half_to_float(uint16_t bits);
EDL_API uint16_t float_to_half(float v);
inline float bfloat16_to_float(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
inline uint16_t float_to_bfloat16(float v) {
  uint32_t u;
  __builtin_memcpy(&u, &v, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN stays NaN
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

// Maps a C++ element type to its DataType.
template <typename T>
struct DataTypeOf;
template <> struct DataTypeOf<float> { static constexpr DataType value = DataType::kFloat32; };
template <> struct DataTypeOf<double> { static constexpr DataType value = DataType::kFloat64; };
template <> struct DataTypeOf<int32_t> { static constexpr DataType value = DataType::kInt32; };
template <> struct DataTypeOf<int64_t> { static constexpr DataType value = DataType::kInt64; };
template <> struct DataTypeOf<Half> { static constexpr DataType value = DataType::kFloat16; };
template <> struct DataTypeOf<BFloat16> { static constexpr DataType value = DataType::kBFloat16; };
template <> struct DataTypeOf<uint8_t> { static constexpr DataType value = DataType::kUInt8; };

}  // namespace edl
