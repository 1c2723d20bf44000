// The fusion row of gpu_allreduce_bench: pack + unpack of the ResNet-50 gradient list (161 tensors,
// 25.6 M floats, each its own cudaMalloc) with the GPU path's batched kernels (src/cuda, compiled
// into this bench) into one fusion buffer and back, against one cudaMemcpy device-to-device of the
// same bytes. Medians of --fusion-reps timings with CUDA events; the unpacked tensors are checked
// bitwise against the originals (#wrong). Runs in a child process (the bench never initialises CUDA).
#include <cuda_runtime.h>

#include <cstdio>
#include <iostream>
#include <random>

#include "cuda/cuda_kernels.h"
#include "cuda/fusion_layout.h"
#include "gpu/gpu_bench.h"
#include "testing/resnet50.h"

namespace edl::bench::gpu {
namespace {

void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Median milliseconds of reps runs of fn on stream s, timed with events.
double time_ms(cudaStream_t s, int reps, const std::function<void()>& fn) {
  cudaEvent_t a, b;
  ok(cudaEventCreate(&a), "cudaEventCreate");
  ok(cudaEventCreate(&b), "cudaEventCreate");
  fn();  // warm-up
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    ok(cudaEventRecord(a, s), "cudaEventRecord");
    fn();
    ok(cudaEventRecord(b, s), "cudaEventRecord");
    ok(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    ok(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return median(t);
}

int fusion_child(const BenchContext& c, const std::string& file) {
  ok(cudaSetDevice(0), "cudaSetDevice");
  const auto counts = edl::testing::resnet50_gradient_counts();
  size_t total = 0;
  for (size_t n : counts) total += n;
  const auto passes = edl::cuda::plan_fusion(counts, 4, total * 4 + counts.size() * 256);
  if (passes.size() != 1) throw std::runtime_error("the ResNet-50 list does not fit one pass");
  void* buffer = nullptr;
  void* copy = nullptr;
  ok(cudaMalloc(&buffer, passes[0].elements * 4), "cudaMalloc");
  ok(cudaMalloc(&copy, total * 4), "cudaMalloc");
  std::vector<float*> in(counts.size()), out(counts.size());
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<std::vector<float>> host(counts.size());
  for (size_t t = 0; t < counts.size(); ++t) {
    host[t].resize(counts[t]);
    for (auto& x : host[t]) x = u(rng);
    ok(cudaMalloc(&in[t], counts[t] * 4), "cudaMalloc");
    ok(cudaMalloc(&out[t], counts[t] * 4), "cudaMalloc");
    ok(cudaMemcpy(in[t], host[t].data(), counts[t] * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // the uploads are done before the kernels on s
  std::vector<edl::cuda::Segment> pack, unpack;
  for (const auto& p : passes[0].pieces) {
    float* buf = static_cast<float*>(buffer) + p.buffer_offset;
    pack.push_back({in[p.tensor] + p.offset, buf, p.count});
    unpack.push_back({buf, out[p.tensor] + p.offset, p.count});
  }
  cudaStream_t s;
  ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  const edl::cuda::Transform copy32{DataType::kFloat32, DataType::kFloat32, 1, 1.0f};
  const double pack_ms = time_ms(s, c.fusion_reps, [&] { edl::cuda::launch_batched(pack, copy32, s); });
  const double unpack_ms = time_ms(s, c.fusion_reps, [&] { edl::cuda::launch_batched(unpack, copy32, s); });
  const double d2d_ms = time_ms(s, c.fusion_reps, [&] {
    ok(cudaMemcpyAsync(copy, buffer, total * 4, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
  });
  long wrong = 0;
  for (size_t t = 0; t < counts.size(); ++t) {
    std::vector<float> back(counts[t]);
    ok(cudaMemcpy(back.data(), out[t], counts[t] * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
    for (size_t i = 0; i < counts[t]; ++i) wrong += std::memcmp(&back[i], &host[t][i], 4) != 0;
  }
  char line[256];
  std::snprintf(line, sizeof(line), "%zu %zu %.6f %.6f %.6f %ld", counts.size(), total * 4, pack_ms, unpack_ms, d2d_ms,
                wrong);
  write_file(file, line);
  return 0;
}

}  // namespace

void fusion_row(const BenchContext& c, Output& out) {
  const std::string dir = c.dir + "/fusion";
  mkdir_p(dir);
  const std::string file = dir + "/result";
  RankSet child(dir, 1, [&](int) { return fusion_child(c, file); });
  const auto st = child.wait(300);
  size_t tensors = 0, bytes = 0;
  double pack_ms = 0, unpack_ms = 0, d2d_ms = 0;
  long wrong = 0;
  if (st[0] != 0 || std::sscanf(slurp(file).c_str(), "%zu %zu %lf %lf %lf %ld", &tensors, &bytes, &pack_ms, &unpack_ms,
                                &d2d_ms, &wrong) != 6) {
    std::cerr << "fusion row failed (status " << st[0] << "):\n" << child.logs();
    out.failed = true;
    return;
  }
  const double pu_us = (pack_ms + unpack_ms) * 1e3;
  Json row = out.base("fusion", 1, bytes, pu_us, wrong);
  row["tensors"] = tensors;
  row["d2d_gbps"] = static_cast<double>(bytes) / (d2d_ms * 1e-3) / 1e9;
  row["pack_unpack_gbps"] = 2.0 * static_cast<double>(bytes) / (pu_us * 1e-6) / 1e9;
  row["algbw_gbps"] = row["pack_unpack_gbps"];
  row["busbw_gbps"] = row["pack_unpack_gbps"];
  out.emit(row);
}

}  // namespace edl::bench::gpu
