// Element values of the collective tests: the dtypes and ops every correctness test sweeps, writing
// and reading one element of any dtype as a double, and the flat reference reduction in rank order
// (exact for the small integers the tests feed in). Used by comm_test.cc and hier_test.cc.
// Thread-safety: pure functions.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "edl/types.h"

namespace edl::test {

inline constexpr DataType kAllTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kInt32,
                                         DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16};
inline constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                                       ReduceOp::kProduct};

// Writes v as element i of buf (dtype dt; rounded for the 16-bit floats).
inline void store_value(void* buf, size_t i, DataType dt, double v) {
  switch (dt) {
    case DataType::kFloat32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(buf)[i] = v; break;
    case DataType::kInt32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v); break;
    case DataType::kFloat16: static_cast<uint16_t*>(buf)[i] = float_to_half(static_cast<float>(v)); break;
    case DataType::kBFloat16: static_cast<uint16_t*>(buf)[i] = float_to_bfloat16(static_cast<float>(v)); break;
    case DataType::kUInt8: static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v); break;
  }
}

// Element i of buf (dtype dt) as a double.
inline double load_value(const void* buf, size_t i, DataType dt) {
  switch (dt) {
    case DataType::kFloat32: return static_cast<const float*>(buf)[i];
    case DataType::kFloat64: return static_cast<const double*>(buf)[i];
    case DataType::kInt32: return static_cast<const int32_t*>(buf)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
    case DataType::kFloat16: return half_to_float(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kBFloat16: return bfloat16_to_float(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kUInt8: return static_cast<const uint8_t*>(buf)[i];
  }
  return 0;
}

// The reduction of element i over n ranks whose inputs are input(rank, i), in rank order; kAverage
// divides by n afterwards (truncating for the integer dtypes, as the collectives do).
template <typename Input>
double reference_reduce(int n, size_t i, ReduceOp op, DataType dt, Input input) {
  double acc = input(0, i);
  for (int r = 1; r < n; ++r) {
    const double v = input(r, i);
    if (op == ReduceOp::kSum || op == ReduceOp::kAverage) acc += v;
    if (op == ReduceOp::kMin) acc = std::min(acc, v);
    if (op == ReduceOp::kMax) acc = std::max(acc, v);
    if (op == ReduceOp::kProduct) acc *= v;
  }
  if (op != ReduceOp::kAverage) return acc;
  if (dt == DataType::kInt32 || dt == DataType::kInt64 || dt == DataType::kUInt8) return std::trunc(acc / n);
  return acc / n;
}

}  // namespace edl::test
