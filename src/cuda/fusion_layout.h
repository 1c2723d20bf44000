// Fusion layout: how a round's device tensors travel through the generation's fusion buffer.
//
// The tensors of one fused allreduce are packed one after the other into the buffer, each piece
// starting at an `align`-byte boundary (256: 16-byte vector copies and NCCL's preferred alignment),
// in the agreed order (every rank computes the same layout from the same counts). When they do not
// all fit, the round takes several passes; a tensor larger than the whole buffer is cut into
// buffer-sized pieces, one pass each. Counts are in elements of the wire type (the buffer's type:
// float32 for 16-bit tensors, which are reduced in float32; the compression type for compressed
// ones).
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <vector>

namespace edl::cuda {

struct FusionPiece {
  size_t tensor = 0;         // index into the counts
  size_t offset = 0;         // first element of the tensor in this piece
  size_t count = 0;          // elements in this piece
  size_t buffer_offset = 0;  // element offset of the piece in the fusion buffer
};

struct FusionPass {
  std::vector<FusionPiece> pieces;
  size_t elements = 0;  // elements of the buffer the pass reduces (end of its last piece)
};

// The passes for tensors of `counts` elements of `wire_size` bytes through a buffer of
// `capacity_bytes`. Zero-count tensors get no piece. Throws InvalidArgument when the buffer cannot
// hold one aligned element.
std::vector<FusionPass> plan_fusion(const std::vector<size_t>& counts, size_t wire_size, size_t capacity_bytes,
                                    size_t align_bytes = 256);

}  // namespace edl::cuda
