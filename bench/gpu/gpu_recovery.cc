// The recovery rows of gpu_allreduce_bench: 3 ranks allreduce 256 KiB in a loop; rank 2 is killed
// with SIGKILL, mid-allreduce (`kill` busy) or after it stopped submitting (`kill` idle: the
// survivors wait in the host negotiation, no NCCL work in flight); the survivors' allreduce fails
// (PeerLostError), they build the next generation of 2 — by ncclCommShrink (EDL_NCCL_SHRINK=1) or a
// fresh communicator (EDL_NCCL_SHRINK=0) — and run one allreduce. recovery_ms: from the kill to the later survivor's completed allreduce (both clocks are
// the machine's monotonic clock). `path` is what the generation actually took ("shrink", or
// "reinit": asked for, or a shrink that failed and fell back); #wrong counts wrong elements of
// the survivors' result. --kills trials per path, each with fresh processes.
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "collective/runtime_state.h"
#include "edl/cuda.h"
#include "edl/error.h"
#include "gpu/gpu_bench.h"

namespace edl::bench::gpu {
namespace {

constexpr size_t kFloats = size_t{1} << 16;

void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

int recovery_rank(const BenchContext& c, const std::string& tag, const std::string& dir, int rank, bool idle) {
  start_rank_runtime(c.store_url, 20000);
  install_generation(tag, 1, rank, 3);
  float* d = nullptr;
  ok(cudaMalloc(&d, kFloats * 4), "cudaMalloc");
  const std::vector<float> ones(kFloats, 1.0f);
  try {
    for (int it = 0;; ++it) {
      ok(cudaMemcpy(d, ones.data(), kFloats * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
      edl::cuda::allreduce(d, kFloats, DataType::kFloat32, nullptr, ReduceOp::kSum, "loop");
      if (it == 3) write_file(dir + "/warm" + std::to_string(rank), "1");
      if (it == 3 && idle && rank == 2)
        for (;;) ::pause();  // until the SIGKILL
    }
  } catch (const CommError&) {
  }
  install_generation(tag, 2, rank, 2);
  ok(cudaMemcpy(d, ones.data(), kFloats * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  edl::cuda::allreduce(d, kFloats, DataType::kFloat32, nullptr, ReduceOp::kSum, "after");
  const double done = now_s();
  std::vector<float> back(kFloats);
  ok(cudaMemcpy(back.data(), d, kFloats * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
  long wrong = 0;
  for (float x : back) wrong += x != 2.0f;
  write_file(dir + "/done" + std::to_string(rank), fmt(done, 6) + " " + edl::cuda::generation_mode() + " " +
                                                      std::to_string(wrong));
  return 0;
}

void trial(const BenchContext& c, bool shrink, bool idle, int k, Output& out) {
  const std::string tag = std::string("recovery-") + (shrink ? "shrink-" : "reinit-") + (idle ? "idle-" : "busy-") +
                          std::to_string(k);
  const std::string dir = c.dir + "/" + tag;
  mkdir_p(dir);
  RankSet ranks(dir, 3, [&](int r) { return recovery_rank(c, tag, dir, r, idle); },
                {std::string("EDL_NCCL_SHRINK=") + (shrink ? "1" : "0")});
  for (int r = 0; r < 3; ++r)
    if (!await_file(dir + "/warm" + std::to_string(r), 120)) {
      std::cerr << tag << ": rank " << r << " never warmed up:\n" << ranks.logs();
      out.failed = true;
      return;
    }
  const double killed = now_s();
  ranks.kill(2);
  const auto st = ranks.wait(120);
  double last = 0;
  long wrong = 0;
  std::string path = "shrink";
  for (int r = 0; r < 2; ++r) {
    double done = 0;
    char mode[32] = {0};
    long w = 0;
    if (st[static_cast<size_t>(r)] != 0 ||
        std::sscanf(slurp(dir + "/done" + std::to_string(r)).c_str(), "%lf %31s %ld", &done, mode, &w) != 3) {
      std::cerr << tag << ": survivor " << r << " failed (status " << st[static_cast<size_t>(r)] << "):\n"
                << ranks.logs();
      out.failed = true;
      return;
    }
    last = std::max(last, done);
    wrong += w;
    if (std::string(mode) != "shrink") path = "reinit";
  }
  const double ms = (last - killed) * 1e3;
  Json row = out.base("recovery", 3, kFloats * 4, ms * 1e3, wrong);
  row["path"] = path;
  row["recovery_ms"] = ms;
  row["shrink_requested"] = shrink;
  row["kill"] = idle ? "idle" : "busy";
  row["trial"] = k;
  out.emit(row);
}

}  // namespace

void recovery_rows(const BenchContext& c, Output& out) {
  for (int k = 0; k < c.kills; ++k) trial(c, true, true, k, out);  // the shrink NCCL 2.28 can do
  for (int k = 0; k < c.kills; ++k) trial(c, true, false, k, out);
  for (int k = 0; k < c.kills; ++k) trial(c, false, false, k, out);
}

}  // namespace edl::bench::gpu
