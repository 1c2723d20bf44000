// The register_state round trip of the CPU and the CUDA suites (torch_state_test.cc, torch_gpu_test.cc):
// an Mlp trained with Adam through edl::torch in a world of one on `device` commits at step 4 with a
// checkpoint directory; restore() rolls parameters and Adam moments back (on CUDA: from the
// device-side copy) and the replay is bitwise the same; a fresh module and optimizer resume from the
// file (on CUDA: host bytes made once, at the commit) and replay bitwise the same.
// Include after torch/torch_util.h and <catch2/catch.hpp>.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "edl/state.h"
#include "edl/torch.h"

namespace torch_test {

inline std::vector<float> flat_on_host(const ::torch::nn::Module& m) {
  std::vector<float> out;
  for (const auto& p : m.parameters()) {
    auto c = p.detach().to(::torch::kCPU).contiguous();
    out.insert(out.end(), c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  }
  return out;
}

// One step of `net` on rows [8 s, 8 s + 8) of `d`, on the module's device.
inline void device_step(Mlp& net, edl::torch::DistributedOptimizer& opt, const Data& d, int s,
                        const ::torch::Device& device) {
  opt.zero_grad();
  auto x = d.x.narrow(0, 8 * s, 8).to(device), y = d.y.narrow(0, 8 * s, 8).to(device);
  ::torch::mse_loss(net->forward(x), y).backward();
  opt.step();
}

inline void checkpoint_round_trip(const ::torch::Device& device) {
  namespace et = edl::torch;
  ::torch::set_num_threads(1);
  const auto data = make_data(8 * 10);
  char tmpl[] = "/tmp/edl-torch-round-trip-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  et::DistributedOptimizerOptions o;
  o.local = true;
  std::vector<float> expected;
  {
    Mlp net;
    net->to(device);
    ::torch::optim::Adam adam(net->parameters(), ::torch::optim::AdamOptions(0.01));
    et::DistributedOptimizer opt(adam, *net, o);
    edl::elastic::State state;
    et::register_state(state, *net, opt);
    state.set_checkpoint_dir(dir);
    for (int s = 0; s < 4; ++s) device_step(net, opt, data, s, device);
    state.step = 4;
    state.commit();
    state.flush_checkpoint();
    REQUIRE(state.checkpoint_error().empty());
    const auto committed = flat_on_host(*net);
    for (int s = 4; s < 7; ++s) device_step(net, opt, data, s, device);
    expected = flat_on_host(*net);
    REQUIRE(expected != committed);
    state.restore();  // back to step 4, Adam moments included
    CHECK(flat_on_host(*net) == committed);
    CHECK(opt.step_count() == 4);
    for (int s = 4; s < 7; ++s) device_step(net, opt, data, s, device);
    CHECK(flat_on_host(*net) == expected);
  }
  Mlp fresh;  // other random parameters, no optimizer state (the same program: the same LR policy)
  fresh->to(device);
  ::torch::optim::Adam adam(fresh->parameters(), ::torch::optim::AdamOptions(0.01));
  et::DistributedOptimizer opt(adam, *fresh, o);
  edl::elastic::State state;
  et::register_state(state, *fresh, opt);
  state.set_checkpoint_dir(dir);
  REQUIRE(state.load_checkpoint());
  CHECK(state.step == 4);
  CHECK(opt.step_count() == 4);
  for (int s = 4; s < 7; ++s) device_step(fresh, opt, data, s, device);
  CHECK(flat_on_host(*fresh) == expected);  // Adam moments and step counts came back exactly
  std::filesystem::remove_all(dir);
}

}  // namespace torch_test
