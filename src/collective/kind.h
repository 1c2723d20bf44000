// The kinds of collective: one enum for the TCP transport's wire header (tcp_internal.h) and the
// engine's negotiation descriptor (engine.h, Desc::kind). The values travel on the wire: never
// renumber them.
//
// Thread-safety: constants and a pure function.
#pragma once

#include <cstdint>

namespace edl::collective {

enum Kind : uint8_t { kAllreduce = 1, kBroadcast = 2, kAllgather = 3, kBarrier = 4 };

// "allreduce", "broadcast", "allgather", "barrier"; "unknown collective" for any other value.
inline const char* kind_name(uint8_t k) {
  switch (k) {
    case kAllreduce: return "allreduce";
    case kBroadcast: return "broadcast";
    case kAllgather: return "allgather";
    case kBarrier: return "barrier";
  }
  return "unknown collective";
}

}  // namespace edl::collective
