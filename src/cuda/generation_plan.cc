#include "cuda/generation_plan.h"

#include <algorithm>

#include "common/codec.h"
#include "edl/error.h"

namespace edl::cuda {
namespace {

constexpr uint32_t kMagic = 0x45444c47u;  // "EDLG"

std::string rank_name(size_t r) { return "rank " + std::to_string(r); }

// Why the ranks cannot shrink from the last generation ("" when they can).
std::string why_not_shrink(const std::vector<RankRecord>& rs, uint64_t generation) {
  const RankRecord& first = rs[0];
  for (size_t r = 0; r < rs.size(); ++r) {
    const RankRecord& x = rs[r];
    if (!x.can_shrink) return rank_name(r) + " cannot shrink (EDL_NCCL_SHRINK=0 or an NCCL without Shrink/Revoke)";
    if (x.parent_rank < 0) return rank_name(r) + " is new to the job's NCCL communicators";
    if (!x.parent_usable) return rank_name(r) + "'s last communicator was aborted";
    if (x.parent_generation + 1 != generation)
      return rank_name(r) + "'s last communicator is of generation " + std::to_string(x.parent_generation) +
             ", not " + std::to_string(generation - 1);
    if (x.parent_size != first.parent_size || x.parent_rank >= x.parent_size)
      return rank_name(r) + " disagrees on the last communicator's size";
    if (r > 0 && x.parent_rank <= rs[r - 1].parent_rank)
      return rank_name(r) + " does not keep its order from the last generation";
  }
  if (static_cast<size_t>(first.parent_size) == rs.size()) return "no member was lost";
  return "";
}

}  // namespace

std::string encode_record(const RankRecord& r) {
  std::string out;
  codec::Writer<std::string> w(out);
  w.u32(kMagic);
  w.u8(r.device_ok ? 1 : 0);
  w.u8(static_cast<uint8_t>(r.transport));
  w.u8(r.can_shrink ? 1 : 0);
  w.u8(r.parent_usable ? 1 : 0);
  w.u64(r.parent_generation);
  w.i32(r.parent_rank);
  w.i32(r.parent_size);
  w.str(r.why, "reason");
  return out;
}

RankRecord decode_record(const void* data, size_t n, int rank) {
  codec::Reader rd(data, n, "GPU generation record of rank " + std::to_string(rank));
  try {
    if (rd.u32("magic") != kMagic) rd.fail("corrupt (bad magic)");
    RankRecord r;
    r.device_ok = rd.u8("device flag") != 0;
    const uint8_t t = rd.u8("transport");
    if (t > static_cast<uint8_t>(Transport::kHost)) rd.fail("unknown transport " + std::to_string(t));
    r.transport = static_cast<Transport>(t);
    r.can_shrink = rd.u8("shrink flag") != 0;
    r.parent_usable = rd.u8("parent flag") != 0;
    r.parent_generation = rd.u64("parent generation");
    r.parent_rank = rd.i32("parent rank");
    r.parent_size = rd.i32("parent size");
    r.why = std::string(rd.str("reason", 4096));
    rd.finish();
    return r;
  } catch (const codec::DecodeError& e) {
    throw CommError(e.what());
  }
}

const char* plan_mode_name(PlanMode m) {
  switch (m) {
    case PlanMode::kDisabled: return "disabled";
    case PlanMode::kLocal: return "local";
    case PlanMode::kHost: return "host";
    case PlanMode::kShrink: return "shrink";
    case PlanMode::kInit: return "init";
  }
  return "unknown";
}

GenerationPlan decide_plan(const std::vector<RankRecord>& rs, uint64_t generation) {
  GenerationPlan p;
  EDL_CHECK(!rs.empty(), InvalidArgument, "decide_plan: no ranks");
  for (size_t r = 0; r < rs.size(); ++r) {
    if (!rs[r].device_ok) {
      p.reason = rank_name(r) + " has no usable CUDA device: " + rs[r].why;
      return p;
    }
    if (rs[r].transport != rs[0].transport) {
      auto name = [](Transport t) { return t == Transport::kHost ? "host" : "nccl"; };
      p.reason = std::string("EDL_GPU_TRANSPORT differs between ranks: rank 0 has ") + name(rs[0].transport) + ", " +
                 rank_name(r) + " has " + name(rs[r].transport);
      return p;
    }
  }
  if (rs.size() == 1) {
    p.mode = PlanMode::kLocal;
    return p;
  }
  if (rs[0].transport == Transport::kHost) {
    p.mode = PlanMode::kHost;
    return p;
  }
  p.reason = why_not_shrink(rs, generation);
  if (!p.reason.empty()) {
    p.mode = PlanMode::kInit;
    return p;
  }
  p.mode = PlanMode::kShrink;
  std::vector<bool> kept(static_cast<size_t>(rs[0].parent_size), false);
  for (const RankRecord& x : rs) kept[static_cast<size_t>(x.parent_rank)] = true;
  for (size_t i = 0; i < kept.size(); ++i)
    if (!kept[i]) p.exclude.push_back(static_cast<int>(i));
  return p;
}

}  // namespace edl::cuda
