// The device kernels of the GPU path, declared without CUDA types (STYLE.md "GPU code"): batched
// conversion copies for packing a round's tensors into the fusion buffer and unpacking them, with
// the dtype conversion (16-bit <-> float32: widening for the reduction, fp16/bf16 wire compression)
// and the post-operation (average, prescale) folded in. Horovod's ops/cuda/cuda_kernels.h has the
// same split. Implemented in cuda_kernels.cu.
//
// Thread-safety: launches may be issued from any thread; each goes to the given stream.
#pragma once

#include <cstddef>
#include <vector>

#include "edl/types.h"

namespace edl::cuda {

// One contiguous run of `count` elements: read from src (type Transform::from), written to dst
// (type Transform::to). src and dst must not overlap unless they are equal (in place, same type).
struct Segment {
  const void* src = nullptr;
  void* dst = nullptr;
  size_t count = 0;
};

// The element transform of a batched copy: from == to (a copy, optionally dividing or scaling), or
// float32 -> float16 / bfloat16 and back. divisor: divide every element (average; integers
// truncate); scale: multiply every float element (compression prescale). At most one of them is
// not 1.
struct Transform {
  DataType from = DataType::kFloat32;
  DataType to = DataType::kFloat32;
  int divisor = 1;
  float scale = 1.0f;
};

// True when the kernels implement `t` (tests/cuda check every combination the backend uses).
bool transform_supported(const Transform& t);

// Launches kernels that apply `t` to every segment (one launch per up to 64 segments; a plain
// copy moves 16-byte vectors when both pointers allow). `stream` is a cudaStream_t. Throws
// CommError naming the CUDA error when a launch fails, InvalidArgument for an unsupported transform.
void launch_batched(const std::vector<Segment>& segments, const Transform& t, void* stream);

}  // namespace edl::cuda
