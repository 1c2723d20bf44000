#include "collective/reduce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "edl/error.h"

namespace edl::collective {
namespace {

template <typename T>
void apply(T* __restrict dst, const T* __restrict src, size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      for (size_t i = 0; i < n; ++i) dst[i] = dst[i] + src[i];
      return;
    case ReduceOp::kProduct:
      for (size_t i = 0; i < n; ++i) dst[i] = dst[i] * src[i];
      return;
    case ReduceOp::kMin:
      for (size_t i = 0; i < n; ++i) dst[i] = src[i] < dst[i] ? src[i] : dst[i];
      return;
    case ReduceOp::kMax:
      for (size_t i = 0; i < n; ++i) dst[i] = src[i] > dst[i] ? src[i] : dst[i];
      return;
  }
  throw InvalidArgument("unknown ReduceOp value " + std::to_string(static_cast<int>(op)));
}

template <typename T>
void divide(T* dst, size_t n, int divisor) {
  const T d = static_cast<T>(divisor);
  for (size_t i = 0; i < n; ++i) dst[i] = dst[i] / d;
}

void widen(const uint16_t* __restrict src, float* __restrict dst, size_t n, DataType dt) {
  if (dt == DataType::kBFloat16) {
    for (size_t i = 0; i < n; ++i) {
      uint32_t u = static_cast<uint32_t>(src[i]) << 16;
      std::memcpy(&dst[i], &u, 4);
    }
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = half_to_float(src[i]);
  }
}

void narrow(const float* __restrict src, uint16_t* __restrict dst, size_t n, DataType dt) {
  if (dt == DataType::kBFloat16) {
    for (size_t i = 0; i < n; ++i) dst[i] = float_to_bfloat16(src[i]);
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = float_to_half(src[i]);
  }
}

constexpr size_t kBlock = 2048;  // elements per accumulation block (stays in L1)

template <typename T>
void ordered_native(T* dst, const void* const* c, int k, size_t n, ReduceOp op, int divisor) {
  alignas(64) T acc[kBlock];
  for (size_t b = 0; b < n; b += kBlock) {
    size_t m = std::min(kBlock, n - b);
    std::memcpy(acc, static_cast<const T*>(c[0]) + b, m * sizeof(T));
    for (int j = 1; j < k; ++j) apply<T>(acc, static_cast<const T*>(c[j]) + b, m, op);
    if (op == ReduceOp::kAverage && divisor != 1) divide<T>(acc, m, divisor);
    std::memcpy(dst + b, acc, m * sizeof(T));
  }
}

void ordered_16(uint16_t* dst, const void* const* c, int k, size_t n, DataType dt, ReduceOp op, int divisor) {
  alignas(64) float acc[kBlock];
  alignas(64) float tmp[kBlock];
  for (size_t b = 0; b < n; b += kBlock) {
    size_t m = std::min(kBlock, n - b);
    widen(static_cast<const uint16_t*>(c[0]) + b, acc, m, dt);
    for (int j = 1; j < k; ++j) {
      widen(static_cast<const uint16_t*>(c[j]) + b, tmp, m, dt);
      apply<float>(acc, tmp, m, op);
    }
    if (op == ReduceOp::kAverage && divisor != 1) divide<float>(acc, m, divisor);
    narrow(acc, dst + b, m, dt);
  }
}

}  // namespace

void reduce_inplace(void* dst, const void* src, size_t n, DataType dt, ReduceOp op) {
  switch (dt) {
    case DataType::kFloat32: return apply(static_cast<float*>(dst), static_cast<const float*>(src), n, op);
    case DataType::kFloat64: return apply(static_cast<double*>(dst), static_cast<const double*>(src), n, op);
    case DataType::kInt32: return apply(static_cast<int32_t*>(dst), static_cast<const int32_t*>(src), n, op);
    case DataType::kInt64: return apply(static_cast<int64_t*>(dst), static_cast<const int64_t*>(src), n, op);
    case DataType::kUInt8: return apply(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), n, op);
    case DataType::kFloat16:
    case DataType::kBFloat16: {
      const void* c[2] = {dst, src};
      return ordered_16(static_cast<uint16_t*>(dst), c, 2, n, dt, op == ReduceOp::kAverage ? ReduceOp::kSum : op, 1);
    }
  }
  throw InvalidArgument("unknown DataType value " + std::to_string(static_cast<int>(dt)));
}

void divide_inplace(void* dst, size_t n, DataType dt, int divisor) {
  if (divisor == 1) return;
  switch (dt) {
    case DataType::kFloat32: return divide(static_cast<float*>(dst), n, divisor);
    case DataType::kFloat64: return divide(static_cast<double*>(dst), n, divisor);
    case DataType::kInt32: return divide(static_cast<int32_t*>(dst), n, divisor);
    case DataType::kInt64: return divide(static_cast<int64_t*>(dst), n, divisor);
    case DataType::kUInt8: return divide(static_cast<uint8_t*>(dst), n, divisor);
    case DataType::kFloat16:
    case DataType::kBFloat16: {
      const void* c[1] = {dst};
      return ordered_16(static_cast<uint16_t*>(dst), c, 1, n, dt, ReduceOp::kAverage, divisor);
    }
  }
  throw InvalidArgument("unknown DataType value " + std::to_string(static_cast<int>(dt)));
}

void reduce_ordered(void* dst, const void* const* c, int k, size_t n, DataType dt, ReduceOp op, int divisor) {
  switch (dt) {
    case DataType::kFloat32: return ordered_native(static_cast<float*>(dst), c, k, n, op, divisor);
    case DataType::kFloat64: return ordered_native(static_cast<double*>(dst), c, k, n, op, divisor);
    case DataType::kInt32: return ordered_native(static_cast<int32_t*>(dst), c, k, n, op, divisor);
    case DataType::kInt64: return ordered_native(static_cast<int64_t*>(dst), c, k, n, op, divisor);
    case DataType::kUInt8: return ordered_native(static_cast<uint8_t*>(dst), c, k, n, op, divisor);
    case DataType::kFloat16:
    case DataType::kBFloat16: return ordered_16(static_cast<uint16_t*>(dst), c, k, n, dt, op, divisor);
  }
  throw InvalidArgument("unknown DataType value " + std::to_string(static_cast<int>(dt)));
}

void widen_to_float(const void* src, float* dst, size_t n, DataType dt) {
  widen(static_cast<const uint16_t*>(src), dst, n, dt);
}

void narrow_from_float(const float* src, void* dst, size_t n, DataType dt) {
  narrow(src, static_cast<uint16_t*>(dst), n, dt);
}

}  // namespace edl::collective
