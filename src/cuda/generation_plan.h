// How the device side of a generation is built: the agreement every rank takes part in before
// touching NCCL (docs/gpu.md, "One NCCL communicator per generation").
//
// Each rank describes itself in a RankRecord (device usable?, EDL_GPU_TRANSPORT, can it shrink,
// its rank in the last generation's NCCL communicator); the records are allgathered over the
// generation's host communicator and every rank applies decide_plan() to the same records, so all
// take the same path without another round trip:
//
//   kDisabled   some rank has no usable device or the ranks disagree on EDL_GPU_TRANSPORT: device
//               requests fail with InvalidArgument naming the reason (the host path is unaffected)
//   kLocal      a world of one: nothing to exchange
//   kHost       EDL_GPU_TRANSPORT=host: device buffers staged through pinned host memory
//   kShrink     the generation only lost members: ncclCommShrink of the last communicator,
//               excluding its missing ranks (survivors keep their order)
//   kInit       otherwise (a joiner, a rank without a live last communicator, shrink off or not in
//               this NCCL): a fresh communicator from a new ncclUniqueId
//
// After a shrink every rank reports whether its part succeeded (a second allgather): unless all
// did, every rank aborts the shrunk communicator and takes kInit.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace edl::cuda {

enum class Transport : uint8_t { kNccl = 0, kHost = 1 };

struct RankRecord {
  bool device_ok = false;       // a CUDA device is usable in this process
  std::string why;              // ... and if not, why
  Transport transport = Transport::kNccl;
  bool can_shrink = false;      // EDL_NCCL_SHRINK on and the loaded NCCL has Shrink and Revoke
  bool parent_usable = false;   // holds a live (healthy or revoked, never aborted) NCCL communicator
  uint64_t parent_generation = 0;
  int32_t parent_rank = -1;     // its rank in that communicator (-1: none)
  int32_t parent_size = 0;
};

std::string encode_record(const RankRecord& r);
// Throws CommError naming the rank when the bytes are not a record.
RankRecord decode_record(const void* data, size_t n, int rank);

enum class PlanMode : uint8_t { kDisabled, kLocal, kHost, kShrink, kInit };
const char* plan_mode_name(PlanMode m);

struct GenerationPlan {
  PlanMode mode = PlanMode::kDisabled;
  std::vector<int> exclude;  // kShrink: ranks of the last communicator left out, ascending
  std::string reason;        // kDisabled: the error; kInit: why not a shrink ("" when none applied)
};

// The plan for generation `generation` whose ranks (in rank order) sent `records`.
GenerationPlan decide_plan(const std::vector<RankRecord>& records, uint64_t generation);

}  // namespace edl::cuda
