// One rank of a multi-process GPU test or bench as a forked child (docs/gpu.md, "Testing on one
// GPU"): its stdout and stderr go to `log`, the `env` entries ("NAME=value") are added, and it gets
// its own NCCL_HOSTID ("<tag>-<parent pid>-<rank>") and NCCL_SOCKET_IFNAME=lo unless that is set, so
// that several NCCL ranks may share one GPU. fn's result is the child's exit status; an exception
// out of fn is printed to the log and exits 1. The caller must not have initialised CUDA (it does
// not survive a fork). No CUDA here: the child does that in fn.
//
// Thread-safety: as testing::Process::forked (fork before the caller starts threads).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "testing/process.h"

namespace edl::testing {

Process fork_rank(int rank, const std::string& log, const std::string& tag, const std::vector<std::string>& env,
                  const std::function<int()>& fn);

}  // namespace edl::testing
