// The gradient list of torchvision's ResNet-50 (1000 classes): 161 tensors, 25,557,032 floats —
// conv weights (no bias), batch-norm scale and shift, the fc weight and bias — in parameter order.
// The fusion workload of the GPU path's test and bench (docs/gpu.md); bench/fusion_bench.cc has
// the Keras variant with biases (214 tensors).
// Thread-safety: a pure function.
#pragma once

#include <cstddef>
#include <vector>

namespace edl::testing {

inline std::vector<size_t> resnet50_gradient_counts() {
  std::vector<size_t> c;
  auto conv = [&](size_t in, size_t out, size_t k) { c.push_back(in * out * k * k); };
  auto bn = [&](size_t ch) { c.insert(c.end(), {ch, ch}); };
  conv(3, 64, 7);
  bn(64);
  const size_t widths[4] = {64, 128, 256, 512}, blocks[4] = {3, 4, 6, 3};
  size_t in = 64;
  for (int s = 0; s < 4; ++s)
    for (size_t b = 0; b < blocks[s]; ++b) {
      const size_t w = widths[s];
      conv(in, w, 1);
      bn(w);
      conv(w, w, 3);
      bn(w);
      conv(w, 4 * w, 1);
      bn(4 * w);
      if (b == 0) {  // the projection shortcut of each stage's first block
        conv(in, 4 * w, 1);
        bn(4 * w);
      }
      in = 4 * w;
    }
  c.push_back(2048 * 1000);
  c.push_back(1000);
  return c;
}

}  // namespace edl::testing
