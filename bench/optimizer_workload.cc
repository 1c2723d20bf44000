// Synthetic ResNet20 workload of optimizer_bench (see optimizer_workload.h).
#include "optimizer_workload.h"

#include <algorithm>
#include <cmath>

#include "common/bench_util.h"

namespace edl::bench {

std::vector<SyntheticLayer> resnet20_layers() {
  std::vector<SyntheticLayer> layers;
  auto conv = [&](int cin, int cout, int hw) {
    layers.push_back({{static_cast<size_t>(cin) * cout * 9}, static_cast<double>(cin) * cout * 9 * hw * hw});
  };
  auto bn = [&](int c, int hw) {
    layers.push_back({{static_cast<size_t>(c), static_cast<size_t>(c)}, 4.0 * c * hw * hw});
  };
  conv(3, 16, 32);
  bn(16, 32);
  int cin = 16;
  const int widths[3] = {16, 32, 64}, sizes[3] = {32, 16, 8};
  for (int stage = 0; stage < 3; ++stage) {
    for (int block = 0; block < 3; ++block) {
      conv(cin, widths[stage], sizes[stage]);
      bn(widths[stage], sizes[stage]);
      conv(widths[stage], widths[stage], sizes[stage]);
      bn(widths[stage], sizes[stage]);
      cin = widths[stage];
    }
  }
  layers.push_back({{640, 10}, 640.0});
  return layers;
}

Compute::Compute() : a_(32 * 32, 0.5f), b_(32 * 32, 0.25f), c_(32 * 32, 0.0f) {}

__attribute__((noinline)) void Compute::run(long reps) {
  float* a = a_.data();
  const float* b = b_.data();
  float* c = c_.data();
  for (long r = 0; r < reps; ++r) {
    for (int i = 0; i < 32; ++i) {
      float acc[32];  // one output row in registers, as a GEMM micro-kernel keeps it
      for (int j = 0; j < 32; ++j) acc[j] = c[i * 32 + j];
      for (int k = 0; k < 32; ++k) {
        const float aik = a[i * 32 + k];
        for (int j = 0; j < 32; ++j) acc[j] += aik * b[k * 32 + j];
      }
      for (int j = 0; j < 32; ++j) c[i * 32 + j] = acc[j];
    }
    a[r & 1023] = c[(r * 7) & 1023] * 1e-6f;
  }
}

double calibrate_gemm_ms() {
  Compute c;
  c.run(200);
  const long reps = 500;
  double best = 1e9;
  // The machine may be shared: the slowest runs measure other people's jobs, not this kernel.
  for (int i = 0; i < 9; ++i) {
    double t0 = now_s();
    c.run(reps);
    best = std::min(best, (now_s() - t0) * 1e3 / reps);
  }
  return best;
}

std::vector<long> backward_reps(const std::vector<SyntheticLayer>& layers, double backward_ms, double gemm_ms) {
  double total_macs = 0;
  for (const auto& l : layers) total_macs += l.macs;
  std::vector<long> reps;
  for (const auto& l : layers) reps.push_back(std::max(1L, std::lround(backward_ms * l.macs / total_macs / gemm_ms)));
  return reps;
}

}  // namespace edl::bench
