// The collective header's names and its validation against this rank's own call (tcp_internal.h).
#include <limits>

#include "collective/tcp_internal.h"

namespace edl::collective {

std::string header_problem(const TcpCommunicator::Header& h, const TcpCommunicator::Header& mine, int peer,
                           uint64_t max_gather_bytes) {
  auto says = [&](const std::string& what) {
    return "rank " + std::to_string(peer) + "'s " + kind_name(h.kind) + " header " + what;
  };
  if (h.magic != kHeaderMagic || h.rank != peer) return says("is corrupt (the byte streams are out of sync)");
  if (h.kind < static_cast<uint8_t>(Kind::kAllreduce) || h.kind > static_cast<uint8_t>(Kind::kBarrier))
    return says("has unknown kind " + std::to_string(h.kind));
  if (h.kind == static_cast<uint8_t>(Kind::kBarrier))
    return h.count == 0 && h.payload == 0 ? "" : says("announces data for a barrier");
  if (h.dtype > static_cast<uint8_t>(DataType::kUInt8)) return says("has unknown dtype " + std::to_string(h.dtype));
  if (h.kind == static_cast<uint8_t>(Kind::kAllreduce) && h.op > static_cast<uint8_t>(ReduceOp::kProduct))
    return says("has unknown reduce op " + std::to_string(h.op));
  const uint64_t es = dtype_size(static_cast<DataType>(h.dtype));
  if (h.count > std::numeric_limits<uint64_t>::max() / es)
    return says("announces " + std::to_string(h.count) + " elements (overflows)");
  const uint64_t bytes = h.count * es;
  // The payload that may follow the header: the whole buffer or nothing, as the kind allows.
  bool payload_ok = false;
  switch (static_cast<Kind>(h.kind)) {
    case Kind::kAllreduce: payload_ok = h.payload == 0 || h.payload == bytes; break;
    case Kind::kBroadcast: payload_ok = h.payload == (h.root == peer ? bytes : 0); break;
    case Kind::kAllgather: payload_ok = h.payload == bytes; break;
    case Kind::kBarrier: break;
    default: break;  // device kinds never travel in a TCP header (refused above)
  }
  if (!payload_ok)
    return says("announces " + std::to_string(h.payload) + " payload bytes for " + std::to_string(h.count) + " x " +
                dtype_name(static_cast<DataType>(h.dtype)));
  // Lengths: an allgather contribution up to the cap; anything else as large as this rank's own
  // call (else it is a mismatch whose payload, drained, must stay under the cap too).
  const bool same_call = h.kind == mine.kind && h.dtype == mine.dtype && h.count == mine.count;
  if (h.kind == static_cast<uint8_t>(Kind::kAllgather) ? bytes > max_gather_bytes
                                                        : (!same_call && h.payload > max_gather_bytes))
    return says("announces " + std::to_string(bytes) + " bytes, more than max_gather_bytes (" +
                std::to_string(max_gather_bytes) + "): refusing to allocate or wait for it");
  return "";
}

}  // namespace edl::collective
