// The NCCL version gate: what the loaded libnccl can do, decided at run time from ncclGetVersion
// (the library found at load time may be older or newer than the nccl.h EDL was compiled with).
//
//   ncclCommShrink   from 2.27.3   (a generation that only lost members is built from the last one)
//   ncclCommRevoke   from 2.28.7   (in-flight work is stopped and the communicator kept for a shrink)
// The shrink path needs both: without Revoke a failed communicator must be aborted at once (its
// kernels may wait for a dead peer for ever), and an aborted communicator cannot be shrunk. So an
// older NCCL falls back to abort + a fresh communicator. 2.28.3 - 2.28.8 had fault-tolerance bugs
// (nvidia-resiliency-ext advises against them): EDL logs a warning for them.
// Revoke and Shrink are looked up with dlsym (nccl_api.cc) so that an older libnccl still loads.
//
// Thread-safety: pure functions.
#pragma once

#include <string>

namespace edl::cuda {

struct NcclVersion {
  int code = 0;  // ncclGetVersion's value
  int major = 0, minor = 0, patch = 0;
  bool shrink = false;   // >= 2.27.3
  bool revoke = false;   // >= 2.28.7
  bool caution = false;  // 2.28.3 .. 2.28.8
  std::string text() const;  // "2.28.9"
};

// Decodes an NCCL version code (NCCL_VERSION(X,Y,Z): X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z after).
NcclVersion nccl_version(int code);

}  // namespace edl::cuda
