// The synthetic workload of optimizer_bench: ResNet20's parameter tensors (269,722 float32 parameters
// in 59 tensors: 3x3 convolutions of 16/32/64 channels, batch-norm weight + bias, fc 64x10 + 10) and
// a backward pass made of busy compute (32x32x32 GEMMs) whose per-layer share follows the layer's
// multiply-adds. The GEMM time is calibrated once, single-threaded, so that `backward_ms` is the
// time of one backward pass on an undisturbed core.
//
// Thread-safety: the functions are pure or use only their arguments; one Compute per thread.
#pragma once

#include <cstddef>
#include <vector>

namespace edl::bench {

// One layer of the synthetic network: its parameter tensors (forward order) and its backward cost.
struct SyntheticLayer {
  std::vector<size_t> counts;
  double macs = 0;  // multiply-adds per image (forward), the layer's weight in the backward cost
};

// ResNet20 for 3x32x32 inputs and 10 classes, in forward order.
std::vector<SyntheticLayer> resnet20_layers();

// Busy compute: 32x32x32 GEMMs on private 4 KiB matrices (kept live so they are not optimised out).
class Compute {
 public:
  Compute();
  // Runs `reps` GEMMs. Not inlined, on purpose: the calibration and the ranks must run the same
  // machine code (inlined copies of this loop were compiled differently at each call site and ran
  // 2-3x apart, so a calibrated 120 ms took ~54 ms in the ranks).
  void run(long reps);

 private:
  std::vector<float> a_, b_, c_;
};

// Milliseconds per GEMM on an undisturbed core: the fastest of several short runs.
double calibrate_gemm_ms();

// GEMMs per layer (backward order is the caller's business) so that one backward pass takes
// `backward_ms` at `gemm_ms` per GEMM; every layer gets at least one.
std::vector<long> backward_reps(const std::vector<SyntheticLayer>& layers, double backward_ms, double gemm_ms);

// The gradient value rank r writes into element i is (r + 1) * grad_value(i).
inline float grad_value(size_t i) { return 0.001f * static_cast<float>((i * 37) % 101) - 0.05f; }

}  // namespace edl::bench
