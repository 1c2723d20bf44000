// The worker of the GPU elastic test (gpu_elastic_test.cc) and of scripts/gpu-check.sh: an elastic
// job whose parameters live in device memory, registered in the State with edl::cuda::register_tensor,
// averaged gradients through edl::cuda::allreduce, run under edl-run.
//
//   gpu_elastic_worker STEPS STEP_MS
//
// Each step: the gradient of this rank (a function of step, rank and index) is uploaded, averaged
// on the device, and the update p -= 0.01 * g is applied (on the host copy, then uploaded back:
// the point is the State and the collectives, not the arithmetic). At the end it prints
// "done <step> <FNV-1a hash of the parameters' bytes>"; every worker that finished must print the
// same line (bitwise identical parameters).
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "edl/cuda.h"
#include "edl/edl.h"
#include "edl/elastic.h"

namespace {

constexpr size_t kParams = 100003;

void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(2);
  }
}

uint64_t fnv1a(const void* p, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ULL;
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: gpu_elastic_worker STEPS STEP_MS\n");
    return 2;
  }
  const int64_t steps = std::atoll(argv[1]);
  const int step_ms = std::atoi(argv[2]);
  edl::init();
  ok(cudaSetDevice(edl::cuda::device()), "cudaSetDevice");
  cudaStream_t s;
  ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  auto stream = reinterpret_cast<edl::cuda::Stream>(s);
  float *params = nullptr, *grad = nullptr;
  ok(cudaMalloc(&params, kParams * 4), "cudaMalloc");
  ok(cudaMalloc(&grad, kParams * 4), "cudaMalloc");
  ok(cudaMemsetAsync(params, 0, kParams * 4, s), "cudaMemset");
  ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  edl::elastic::State state;
  edl::cuda::register_tensor(state, "params", params, kParams, edl::DataType::kFloat32, stream);
  std::vector<float> h(kParams), g(kParams);
  edl::elastic::run(state, [&] {
    while (state.step < steps) {
      const int rank = edl::rank();
      for (size_t i = 0; i < kParams; ++i)
        g[i] = static_cast<float>((state.step * 31 + rank * 7 + static_cast<int64_t>(i)) % 13) - 6.0f;
      ok(cudaMemcpyAsync(grad, g.data(), kParams * 4, cudaMemcpyHostToDevice, s), "upload");
      edl::cuda::allreduce(grad, kParams, edl::DataType::kFloat32, stream, edl::ReduceOp::kAverage, "grad");
      ok(cudaMemcpyAsync(g.data(), grad, kParams * 4, cudaMemcpyDeviceToHost, s), "download");
      ok(cudaMemcpyAsync(h.data(), params, kParams * 4, cudaMemcpyDeviceToHost, s), "download");
      ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      for (size_t i = 0; i < kParams; ++i) h[i] -= 0.01f * g[i];
      ok(cudaMemcpyAsync(params, h.data(), kParams * 4, cudaMemcpyHostToDevice, s), "upload");
      ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      if (step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
      edl::notify_batch_end();
    }
  });
  ok(cudaMemcpy(h.data(), params, kParams * 4, cudaMemcpyDeviceToHost), "download");
  std::printf("done %lld %016llx\n", static_cast<long long>(state.step),
              static_cast<unsigned long long>(fnv1a(h.data(), kParams * 4)));
  std::fflush(stdout);
  edl::shutdown();
  return 0;
}
