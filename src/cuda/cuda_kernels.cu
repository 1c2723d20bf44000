// Batched conversion copies (cuda_kernels.h). One launch covers up to kMaxSegments segments: each
// segment owns a contiguous range of blocks, and a block finds its segment by binary search over
// the segments' first blocks (all in the kernel's parameter space), so a round of many small
// tensors costs one launch, not one per tensor.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/convert.h"
#include "cuda/cuda_kernels.h"
#include "edl/error.h"

namespace edl::cuda {
namespace {

using convert::BF16;
using convert::F16;
using convert::Storage;

constexpr int kThreads = 256;
constexpr int kMaxSegments = 64;
constexpr int kVectorsPerThread = 4;
constexpr size_t kCopyBytesPerBlock = size_t{kThreads} * kVectorsPerThread * 16;  // 16 KiB
constexpr size_t kElementsPerBlock = size_t{kThreads} * 8;

struct Piece {
  const void* src;
  void* dst;
  size_t n;               // bytes (plain copy) or elements (conversion)
  unsigned first_block;
};
struct Batch {  // passed by value: 64 x 32 bytes + 8, inside the 4 KiB parameter limit
  int count;
  Piece p[kMaxSegments];
};

__device__ __forceinline__ int find_piece(const Batch& b) {
  int lo = 0, hi = b.count - 1;
  const unsigned block = blockIdx.x;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (b.p[mid].first_block <= block) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// This block's piece and its range [*begin, *end) within it (per_block units per block); false when
// the block has nothing to do.
__device__ __forceinline__ bool block_range(const Batch& b, size_t per_block, Piece* pc, size_t* begin, size_t* end) {
  *pc = b.p[find_piece(b)];
  *begin = static_cast<size_t>(blockIdx.x - pc->first_block) * per_block;
  if (*begin >= pc->n) return false;
  *end = *begin + per_block < pc->n ? *begin + per_block : pc->n;
  return true;
}

// A plain copy: 16-byte vectors when source and destination are 16-byte aligned (every load of a
// thread is issued before its first store), bytes otherwise.
__global__ void __launch_bounds__(kThreads) copy_kernel(const Batch b) {
  Piece pc;
  size_t begin, end;
  if (!block_range(b, kCopyBytesPerBlock, &pc, &begin, &end)) return;
  const char* src = static_cast<const char*>(pc.src);
  char* dst = static_cast<char*>(pc.dst);
  size_t tail = begin;
  if (((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) & 15u) == 0) {
    const size_t vectors = (end - begin) / 16;
    const uint4* s4 = reinterpret_cast<const uint4*>(src + begin);
    uint4* d4 = reinterpret_cast<uint4*>(dst + begin);
    uint4 r[kVectorsPerThread];
#pragma unroll
    for (int k = 0; k < kVectorsPerThread; ++k) {
      const size_t i = threadIdx.x + static_cast<size_t>(k) * kThreads;
      if (i < vectors) r[k] = s4[i];
    }
#pragma unroll
    for (int k = 0; k < kVectorsPerThread; ++k) {
      const size_t i = threadIdx.x + static_cast<size_t>(k) * kThreads;
      if (i < vectors) d4[i] = r[k];
    }
    tail = begin + vectors * 16;
  }
  for (size_t i = tail + threadIdx.x; i < end; i += kThreads) dst[i] = src[i];
}

template <typename In, typename Out>
__global__ void __launch_bounds__(kThreads) convert_kernel(const Batch b, int divisor, float scale) {
  using InBits = typename Storage<In>::Bits;
  using OutBits = typename Storage<Out>::Bits;
  Piece pc;
  size_t begin, end;
  if (!block_range(b, kElementsPerBlock, &pc, &begin, &end)) return;
  const InBits* src = static_cast<const InBits*>(pc.src);
  OutBits* dst = static_cast<OutBits*>(pc.dst);
  for (size_t i = begin + threadIdx.x; i < end; i += kThreads)
    dst[i] = convert::convert_one<In, Out>(src[i], divisor, scale);
}

using Launcher = void (*)(const Batch&, unsigned blocks, int divisor, float scale, cudaStream_t stream);

template <typename In, typename Out>
void launch_convert(const Batch& b, unsigned blocks, int divisor, float scale, cudaStream_t stream) {
  convert_kernel<In, Out><<<blocks, kThreads, 0, stream>>>(b, divisor, scale);
}

void launch_copy(const Batch& b, unsigned blocks, int, float, cudaStream_t stream) {
  copy_kernel<<<blocks, kThreads, 0, stream>>>(b);
}

// The launcher of a transform, or null when the kernels do not implement it.
Launcher pick(const Transform& t, bool* bytes) {
  *bytes = false;
  const bool plain = t.divisor == 1 && t.scale == 1.0f;
  if (t.from == t.to) {
    if (plain) {
      *bytes = true;
      return launch_copy;
    }
    const bool is_float = t.from != DataType::kInt32 && t.from != DataType::kInt64 && t.from != DataType::kUInt8;
    if (t.scale != 1.0f && !is_float) return nullptr;
    switch (t.from) {
      case DataType::kFloat32: return launch_convert<float, float>;
      case DataType::kFloat64: return launch_convert<double, double>;
      case DataType::kInt32: return launch_convert<int32_t, int32_t>;
      case DataType::kInt64: return launch_convert<int64_t, int64_t>;
      case DataType::kFloat16: return launch_convert<F16, F16>;
      case DataType::kBFloat16: return launch_convert<BF16, BF16>;
      case DataType::kUInt8: return launch_convert<uint8_t, uint8_t>;
    }
    return nullptr;
  }
  if (t.from == DataType::kFloat32 && t.to == DataType::kFloat16) return launch_convert<float, F16>;
  if (t.from == DataType::kFloat32 && t.to == DataType::kBFloat16) return launch_convert<float, BF16>;
  if (t.from == DataType::kFloat16 && t.to == DataType::kFloat32) return launch_convert<F16, float>;
  if (t.from == DataType::kBFloat16 && t.to == DataType::kFloat32) return launch_convert<BF16, float>;
  return nullptr;
}

std::string describe(const Transform& t) {
  return std::string(dtype_name(t.from)) + " -> " + dtype_name(t.to) + " (divisor " + std::to_string(t.divisor) +
         ", scale " + std::to_string(t.scale) + ")";
}

}  // namespace

bool transform_supported(const Transform& t) {
  bool bytes;
  return t.divisor >= 1 && pick(t, &bytes) != nullptr;
}

void launch_batched(const std::vector<Segment>& segments, const Transform& t, void* stream) {
  bool bytes = false;
  const Launcher launch = t.divisor >= 1 ? pick(t, &bytes) : nullptr;
  if (!launch) throw InvalidArgument("GPU kernels: unsupported conversion " + describe(t));
  const size_t es = dtype_size(t.from);
  const size_t per_block = bytes ? kCopyBytesPerBlock : kElementsPerBlock;
  Batch b{};
  unsigned blocks = 0;
  auto flush = [&] {
    if (b.count == 0) return;
    launch(b, blocks, t.divisor, t.scale, static_cast<cudaStream_t>(stream));
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
      throw CommError(std::string("GPU kernels: launch of ") + describe(t) + " failed: " + cudaGetErrorString(e));
    b.count = 0;
    blocks = 0;
  };
  for (const Segment& s : segments) {
    if (s.count == 0) continue;
    const size_t n = bytes ? s.count * es : s.count;
    const size_t need = (n + per_block - 1) / per_block;
    if (b.count == kMaxSegments || blocks + need > 0x7fffffffu) flush();
    if (need > 0x7fffffffu) throw InvalidArgument("GPU kernels: a segment of " + std::to_string(s.count) + " elements is too large");
    b.p[b.count++] = Piece{s.src, s.dst, n, blocks};
    blocks += static_cast<unsigned>(need);
  }
  flush();
}

}  // namespace edl::cuda
