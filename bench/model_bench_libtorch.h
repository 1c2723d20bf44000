// libtorch baseline for model_bench (built only with -DEDL_BENCH_WITH_LIBTORCH=ON): the same ResNet20
// (option-A shortcuts) and MobileNetV2 (CIFAR variant) architectures as models/, trained with
// torch::optim::SGD (momentum 0.9) on the same random batch shape, default NCHW memory format.
#pragma once

#include <string>

namespace edl::bench {

struct TorchResult {
  double images_per_s = 0;
  bool finite = true;
  size_t parameters = 0;  // scalars in the libtorch model (must equal the EDL model's)
};

TorchResult run_libtorch(const std::string& model, bool train, int threads, int batch, int warmup, int iters,
                         int channels, int height, int width, int classes);

}  // namespace edl::bench
