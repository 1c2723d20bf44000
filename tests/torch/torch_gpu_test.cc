// edl::torch on CUDA tensors in one process (label gpu; docs/torch.md, "CUDA tensors"): a world of
// one trains exactly as the plain torch optimizer and reduces nothing (p.grad() used in place);
// CUDA parameters, buffers and optimizer state round-trip through commit / restore and through a
// checkpoint file; mixed CPU / CUDA parameters are refused. The 2-rank job with a kill -9 inside
// backward and a join on CUDA is kill_join_test.sh --device cuda. Without a usable GPU every test
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

namespace et = edl::torch;
namespace test = torch_test;
using test::Mlp;

namespace {

bool gpu_or_skip() {
  return edl::testing::require_gpu(::torch::cuda::is_available(),
                                   "libtorch sees no CUDA device (torch::cuda::is_available() is false)");
}

const ::torch::Device kGpu(::torch::kCUDA, 0);

std::string temp_dir() {
  char tmpl[] = "/tmp/edl-torch-gpu-XXXXXX";
  char* d = mkdtemp(tmpl);
  REQUIRE(d != nullptr);
  return d;
}

std::vector<float> flat_cpu(const ::torch::nn::Module& m) {
  std::vector<float> out;
  for (const auto& p : m.parameters()) {
    auto c = p.detach().to(::torch::kCPU).contiguous();
    out.insert(out.end(), c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  }
  return out;
}

void train_step(Mlp& net, et::DistributedOptimizer& opt, const test::Data& d, int s) {
  opt.zero_grad();
  auto x = d.x.narrow(0, 8 * s, 8).to(kGpu), y = d.y.narrow(0, 8 * s, 8).to(kGpu);
  ::torch::mse_loss(net->forward(x), y).backward();
  opt.step();
}

}  // namespace

TEST_CASE("torch gpu: a world of one on CUDA trains as the plain optimizer, gradients used in place") {
  if (!gpu_or_skip()) return;
  const auto data = test::make_data(8 * 6);
  Mlp net, plain;
  test::copy_module(*net, *plain);
  net->to(kGpu);
  plain->to(kGpu);
  const auto start = flat_cpu(*net);
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
  CHECK(flat_cpu(*net) == flat_cpu(*plain));
  CHECK(flat_cpu(*net) != start);  // training moved them: the comparison is not vacuous
}

TEST_CASE("torch gpu: CUDA parameters and Adam state round-trip through commit / restore and a checkpoint file") {
  if (!gpu_or_skip()) return;
  const auto data = test::make_data(8 * 10);
  const std::string dir = temp_dir();
  std::vector<float> expected;
  {
    Mlp net;
    net->to(kGpu);
    ::torch::optim::Adam adam(net->parameters(), ::torch::optim::AdamOptions(0.01));
    et::DistributedOptimizerOptions o;
    o.local = true;
    et::DistributedOptimizer opt(adam, *net, o);
    edl::elastic::State state;
    et::register_state(state, *net, opt);
    state.set_checkpoint_dir(dir);
    for (int s = 0; s < 4; ++s) train_step(net, opt, data, s);
    state.step = 4;
    state.commit();
    state.flush_checkpoint();
    REQUIRE(state.checkpoint_error().empty());
    const auto committed = flat_cpu(*net);
    for (int s = 4; s < 7; ++s) train_step(net, opt, data, s);
    expected = flat_cpu(*net);
    REQUIRE(expected != committed);
    state.restore();  // back to step 4 on the device, Adam moments included
    CHECK(flat_cpu(*net) == committed);
    for (int s = 4; s < 7; ++s) train_step(net, opt, data, s);
    CHECK(flat_cpu(*net) == expected);
  }
  Mlp fresh;  // other random parameters, no optimizer state
  fresh->to(kGpu);
  ::torch::optim::Adam adam(fresh->parameters(), ::torch::optim::AdamOptions(0.01));
  et::DistributedOptimizerOptions o;
  o.local = true;
  et::DistributedOptimizer opt(adam, *fresh, o);
  edl::elastic::State state;
  et::register_state(state, *fresh, opt);
  state.set_checkpoint_dir(dir);
  REQUIRE(state.load_checkpoint());
  CHECK(state.step == 4);
  for (int s = 4; s < 7; ++s) train_step(fresh, opt, data, s);
  CHECK(flat_cpu(*fresh) == expected);
  std::filesystem::remove_all(dir);
}

TEST_CASE("torch gpu: parameters split between the CPU and a CUDA device are refused") {
  if (!gpu_or_skip()) return;
  Mlp net;
  net->fc2->to(kGpu);
  ::torch::optim::SGD sgd(net->parameters(), ::torch::optim::SGDOptions(0.1));
  CHECK_THROWS_AS(et::DistributedOptimizer(sgd, *net), edl::InvalidArgument);
}
