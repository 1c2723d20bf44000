// gpu_allreduce_bench's shared pieces: the run's context (flags, scratch directory, store), the
// row writer (table + JSON with the fields of every row) and the fusion and recovery rows.
//
// Thread-safety: the bench's main thread only.
#pragma once

#include <string>
#include <vector>

#include "common/bench_util.h"
#include "gpu/gpu_ranks.h"

namespace edl::bench::gpu {

struct BenchContext {
  std::vector<int> ranks;
  std::vector<size_t> sizes;
  std::vector<std::string> impls;
  int iters = 20, warmup = 3, kills = 5, fusion_reps = 20;
  std::string commit, dir, store_url;
};
// Validates the flags (InvalidArgument-style std::invalid_argument naming the flag).
BenchContext context_from(const cxxopts::ParseResult& args);
void mkdir_p(const std::string& dir);

class Output {
 public:
  Output(const BenchContext& c, const GpuInfo& g, const std::string& json);
  void header() const;
  // The fields every row has: impl, ranks, bytes, time_us, algbw_gbps, busbw_gbps (nccl-tests:
  // busbw = algbw x 2(n-1)/n), wrong, device, driver_version, cuda_version, nccl_version, commit, time.
  Json base(const std::string& impl, int ranks, size_t bytes, double time_us, long wrong) const;
  void emit(const Json& row);
  bool failed = false;

 private:
  const BenchContext& c_;
  GpuInfo g_;
  JsonRows rows_;
  Table table_;
};

void fusion_row(const BenchContext& c, Output& out);     // gpu_fusion.cc
void recovery_rows(const BenchContext& c, Output& out);  // gpu_recovery.cc

}  // namespace edl::bench::gpu
