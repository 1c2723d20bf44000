// Reference values for allreduce tests over every dtype (float32/64, int32/64, float16, bfloat16,
// uint8) and every op: small integer inputs (uint8: their absolute values), element access through
// a double, the reference reduction in rank order (uint8 wraps modulo 256 like the kernels; integer
// average truncates), and the tolerance of each dtype (16-bit floats are rounded once).
// Thread-safety: pure functions.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "edl/types.h"

namespace edl::test {

inline const DataType kAllTypes[] = {DataType::kFloat32, DataType::kFloat64,  DataType::kInt32, DataType::kInt64,
                                     DataType::kFloat16, DataType::kBFloat16, DataType::kUInt8};
inline const ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                                   ReduceOp::kProduct};

// Element i of rank r: an integer in [-2, 2] (uint8: [0, 2]); sums and products of up to 8 of them
// are exact in every dtype but uint8, whose products wrap (the reference wraps too).
inline double ref_input(int rank, size_t i, DataType dt) {
  const int v = static_cast<int>((i * 7 + static_cast<size_t>(rank) * 3) % 5) - 2;
  return dt == DataType::kUInt8 ? std::abs(v) : v;
}

inline void ref_put(void* b, size_t i, DataType dt, double v) {
  switch (dt) {
    case DataType::kFloat32: static_cast<float*>(b)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(b)[i] = v; break;
    case DataType::kInt32: static_cast<int32_t*>(b)[i] = static_cast<int32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(b)[i] = static_cast<int64_t>(v); break;
    case DataType::kFloat16: static_cast<uint16_t*>(b)[i] = float_to_half(static_cast<float>(v)); break;
    case DataType::kBFloat16: static_cast<uint16_t*>(b)[i] = float_to_bfloat16(static_cast<float>(v)); break;
    case DataType::kUInt8: static_cast<uint8_t*>(b)[i] = static_cast<uint8_t>(v); break;
  }
}

inline double ref_get(const void* b, size_t i, DataType dt) {
  switch (dt) {
    case DataType::kFloat32: return static_cast<const float*>(b)[i];
    case DataType::kFloat64: return static_cast<const double*>(b)[i];
    case DataType::kInt32: return static_cast<const int32_t*>(b)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(b)[i]);
    case DataType::kFloat16: return half_to_float(static_cast<const uint16_t*>(b)[i]);
    case DataType::kBFloat16: return bfloat16_to_float(static_cast<const uint16_t*>(b)[i]);
    case DataType::kUInt8: return static_cast<const uint8_t*>(b)[i];
  }
  return 0;
}

// The allreduce of element i over n ranks, in rank order.
inline double ref_result(int n, size_t i, ReduceOp op, DataType dt) {
  const bool u8 = dt == DataType::kUInt8;
  double acc = ref_input(0, i, dt);
  for (int r = 1; r < n; ++r) {
    const double v = ref_input(r, i, dt);
    if (op == ReduceOp::kSum || op == ReduceOp::kAverage) acc += v;
    if (op == ReduceOp::kMin) acc = std::min(acc, v);
    if (op == ReduceOp::kMax) acc = std::max(acc, v);
    if (op == ReduceOp::kProduct) acc *= v;
    if (u8) acc = std::fmod(acc, 256.0);
  }
  if (op != ReduceOp::kAverage) return acc;
  if (dt == DataType::kInt32 || dt == DataType::kInt64 || u8) return std::trunc(acc / n);
  return acc / n;
}

inline bool ref_close(double got, double want, DataType dt) {
  const double tol = dt == DataType::kFloat16 ? 1e-3 : dt == DataType::kBFloat16 ? 8e-3 : dt == DataType::kFloat32 ? 1e-6 : 0;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

}  // namespace edl::test
