// edl::torch on CUDA tensors in one process (label gpu; docs/torch.md, "CUDA tensors"): a world of
// one trains exactly as the plain torch optimizer and reduces nothing (p.grad() used in place);
// CUDA parameters and Adam state round-trip through commit / restore (device-side copies) and through
// a checkpoint file (round_trip.h, shared with the CPU suite); mixed CPU / CUDA parameters are
// refused. Multi-process on one GPU (edl-run --one-gpu-test): kill_join_test.sh --device cuda (a
// kill -9 inside backward and a join), doubled_batch_test.sh --device cuda (2 ranks == one process
// with the doubled batch, SGD+momentum and Adam; different shapes across ranks: MismatchError). Without a usable GPU every test
// skips with one line; EDL_REQUIRE_GPU=1 makes that a failure (scripts/gpu-check.sh sets it).
#include "torch/torch_util.h"  // first: see the note on CHECK there

#include <catch2/catch.hpp>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "edl/error.h"
#include "edl/torch.h"
#include "testing/require_dep.h"
#include "torch/round_trip.h"

namespace et = edl::torch;
namespace test = torch_test;
using test::Mlp;

namespace {

bool gpu_or_skip() {
  return edl::testing::require_gpu(::torch::cuda::is_available(),
                                   "libtorch sees no CUDA device (torch::cuda::is_available() is false)");
}

const ::torch::Device kGpu(::torch::kCUDA, 0);

}  // namespace

TEST_CASE("torch gpu: a world of one on CUDA trains as the plain optimizer, gradients used in place") {
  if (!gpu_or_skip()) return;
  const auto data = test::make_data(8 * 6);
  Mlp net, plain;
  test::copy_module(*net, *plain);
  net->to(kGpu);
  plain->to(kGpu);
  const auto start = test::flat_on_host(*net);
  ::torch::optim::SGD sgd(net->parameters(), ::torch::optim::SGDOptions(0.05).momentum(0.9));
  ::torch::optim::SGD ref(plain->parameters(), ::torch::optim::SGDOptions(0.05).momentum(0.9));
  et::DistributedOptimizerOptions o;
  o.local = true;
  et::DistributedOptimizer opt(sgd, *net, o);
  for (int s = 0; s < 6; ++s) {
    opt.zero_grad();
    auto x = data.x.narrow(0, 8 * s, 8).to(kGpu), y = data.y.narrow(0, 8 * s, 8).to(kGpu);
    ::torch::mse_loss(net->forward(x), y).backward();
    std::vector<const void*> before;
    for (const auto& p : net->parameters()) before.push_back(p.grad().data_ptr());
    opt.step();
    size_t i = 0;
    for (const auto& p : net->parameters()) CHECK(p.grad().data_ptr() == before[i++]);  // no copy
    ref.zero_grad();
    ::torch::mse_loss(plain->forward(x), y).backward();
    ref.step();
  }
  CHECK(test::flat_on_host(*net) == test::flat_on_host(*plain));
  CHECK(test::flat_on_host(*net) != start);  // training moved them: the comparison is not vacuous
}

TEST_CASE("torch gpu: CUDA parameters and Adam state round-trip through commit / restore and a checkpoint file") {
  if (!gpu_or_skip()) return;
  test::checkpoint_round_trip(kGpu);  // the CPU suite's round trip, on the device (device-side commit copies)
}

TEST_CASE("torch gpu: parameters split between the CPU and a CUDA device are refused") {
  if (!gpu_or_skip()) return;
  Mlp net;
  net->fc2->to(kGpu);
  ::torch::optim::SGD sgd(net->parameters(), ::torch::optim::SGDOptions(0.1));
  CHECK_THROWS_AS(et::DistributedOptimizer(sgd, *net), edl::InvalidArgument);
}
