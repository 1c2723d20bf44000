// The rank processes of gpu_allreduce_bench: several ranks on one GPU, each a forked process with
// its own NCCL_HOSTID (docs/gpu.md, "Testing on one GPU"), over a store served by a child process.
// The bench's own process never initialises CUDA (CUDA does not survive a fork): the GPU is probed,
// measured and checked in children, which report through files in a scratch directory.
//
// Thread-safety: the bench's main thread only.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "testing/process.h"

namespace edl::bench::gpu {

// What the device check rows name: the GPU, the driver, CUDA and NCCL versions.
struct GpuInfo {
  bool ok = false;
  std::string why;     // when !ok
  std::string device;  // cudaGetDeviceProperties().name
  std::string driver;  // cudaDriverGetVersion, "13.0"
  std::string cuda;    // cudaRuntimeGetVersion
  std::string nccl;    // ncclGetVersion
  bool revoke_and_shrink = false;
};
GpuInfo probe_gpu(const std::string& dir);

// An edl::StoreServer in a child process, killed on destruction.
class StoreProcess {
 public:
  explicit StoreProcess(const std::string& dir);
  const std::string& url() const { return url_; }

 private:
  testing::Process proc_;
  std::string url_;
};

// n forked rank children running fn(rank) (testing/rank_process.h: own NCCL_HOSTID, output in
// <dir>/rank<r>.log, exit status fn's result).
class RankSet {
 public:
  RankSet(std::string dir, int n, const std::function<int(int)>& fn, const std::vector<std::string>& env = {});
  // Exit statuses after at most timeout_s (-1: still running, then killed).
  std::vector<int> wait(double timeout_s);
  void kill(int rank);
  std::string logs() const;

 private:
  std::string dir_;
  std::vector<testing::Process> procs_;
};

// Waits until file exists; false after timeout_s.
bool await_file(const std::string& path, double timeout_s);

// A rank child's runtime over the store at url: config from the environment with these overrides,
// generation `id` installed under "bench/<tag>/" (local rank = rank), the device made current.
void start_rank_runtime(const std::string& url, int timeout_ms);
void install_generation(const std::string& tag, uint64_t id, int rank, int size);

}  // namespace edl::bench::gpu
