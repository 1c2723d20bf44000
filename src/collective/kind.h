// The kinds of collective: one enum for the TCP transport's wire header (tcp_internal.h) and the
// engine's negotiation descriptor (engine.h, Desc::kind). The values travel on the wire: never
// renumber them.
//
// The device kinds (5..9) are requests on device memory (libedl_cuda, docs/gpu.md): they are
// negotiated like the others but executed by the generation's DeviceBackend (collective/device.h),
// never on the TCP data path. A host and a device request of the same name are a mismatch, and so
// are two device allreduces that differ in their wire compression.
//
// Thread-safety: constants and pure functions.
#pragma once

#include <cstdint>

namespace edl::collective {

enum Kind : uint8_t {
  kAllreduce = 1,
  kBroadcast = 2,
  kAllgather = 3,
  kBarrier = 4,
  kDeviceAllreduce = 5,      // device tensors, reduced in their own dtype (16-bit types in float32)
  kDeviceBroadcast = 6,
  kDeviceAllgather = 7,
  kDeviceAllreduceFp16 = 8,  // float32 device tensors sent as float16 (compression)
  kDeviceAllreduceBf16 = 9,  // float32 device tensors sent as bfloat16 (compression)
  kLastKind = kDeviceAllreduceBf16,
};

inline bool is_device_kind(uint8_t k) { return k >= kDeviceAllreduce && k <= kDeviceAllreduceBf16; }
// Allreduces (host or device) are grouped and fused by the engine.
inline bool is_allreduce_kind(uint8_t k) {
  return k == kAllreduce || k == kDeviceAllreduce || k == kDeviceAllreduceFp16 || k == kDeviceAllreduceBf16;
}

// "allreduce", "broadcast", ..., "device allreduce (fp16 wire)"; "unknown collective" for any other value.
inline const char* kind_name(uint8_t k) {
  switch (k) {
    case kAllreduce: return "allreduce";
    case kBroadcast: return "broadcast";
    case kAllgather: return "allgather";
    case kBarrier: return "barrier";
    case kDeviceAllreduce: return "device allreduce";
    case kDeviceBroadcast: return "device broadcast";
    case kDeviceAllgather: return "device allgather";
    case kDeviceAllreduceFp16: return "device allreduce (fp16 wire)";
    case kDeviceAllreduceBf16: return "device allreduce (bf16 wire)";
  }
  return "unknown collective";
}

}  // namespace edl::collective
