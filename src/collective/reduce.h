// Reduction kernels of the collectives: pointer + count + DataType, no templates in the algorithms.
//
// Plain loops over __restrict pointers that GCC vectorises with -march=native. 16-bit types
// (float16, bfloat16) are never reduced in 16-bit arithmetic: the ordered reduction converts every
// contribution to float32, accumulates, applies the average and rounds once; the ring algorithm
// converts the whole tensor to float32 before it starts (see docs/collectives.md).
// Thread-safety: pure functions.
#pragma once

#include <cstddef>

#include "edl/types.h"

namespace edl::collective {

// dst[i] = dst[i] op src[i] for n elements. kAverage reduces like kSum (divide afterwards).
// For 16-bit types each call rounds once (used only where that is the only rounding).
void reduce_inplace(void* dst, const void* src, size_t n, DataType dt, ReduceOp op);

// dst[i] /= divisor (integer types: truncating division). No-op for divisor 1.
void divide_inplace(void* dst, size_t n, DataType dt, int divisor);

// dst = c[0] op c[1] op ... op c[k-1], evaluated left to right (so every rank that reduces the same
// contributions in the same order gets bitwise the same result), then divided by `divisor` when
// op is kAverage. Contributions may alias dst. 16-bit types accumulate in float32, round once.
void reduce_ordered(void* dst, const void* const* contribs, int k, size_t n, DataType dt, ReduceOp op,
                    int divisor);

// 16-bit <-> float32 bulk conversions (round to nearest even).
void widen_to_float(const void* src, float* dst, size_t n, DataType dt);
void narrow_from_float(const float* src, void* dst, size_t n, DataType dt);

inline bool is_16bit_float(DataType dt) { return dt == DataType::kFloat16 || dt == DataType::kBFloat16; }

}  // namespace edl::collective
