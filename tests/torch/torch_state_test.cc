// edl::torch with edl::elastic::State (issue 15, items 4 and 6): register_state round trips through
// commit / restore and a checkpoint file, and the rescaling policies (LR, momentum compensation of
// torch's u-form SGD buffer) reproduce EDL's own v-form SGD across a simulated resize.
#include "torch/torch_util.h"  // first: see the note on CHECK there

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "edl/error.h"
#include "edl/optim.h"
#include "edl/state.h"
#include "edl/torch.h"
#include "torch/round_trip.h"

namespace et = edl::torch;
namespace test = torch_test;
using torch_test::Mlp;

namespace {

edl::elastic::GenerationInfo generation(uint64_t id, int size, int previous) {
  edl::elastic::GenerationInfo info;
  info.generation = id;
  info.size = size;
  info.previous_size = previous;
  return info;
}

// Trains `net` one step on rows [8 s, 8 s + 8) with the wrapper.
void train_step(Mlp& net, et::DistributedOptimizer& opt, const test::Data& data, int s) {
  opt.zero_grad();
  test::loss_on(net, data, int64_t{s} * 8, 8).backward();
  opt.step();
}

}  // namespace

// Tolerance: relative 1e-4 / absolute 1e-6 (v-form and u-form round differently: lr * g vs g).
TEST_CASE("momentum compensation: torch SGD (u-form) under edl::torch follows EDL's v-form SGD across a resize") {
  ::torch::set_num_threads(1);
  const auto data = test::make_data(8 * 20);
  struct Case {
    const char* name;
    bool compensation;
    int steps;
  };
  for (const Case c : {Case{"ramp over 8 steps", true, 8}, Case{"full at once", true, 0}, Case{"none", false, 8}}) {
    SECTION(c.name) {
      edl::optim::ScalingPolicy policy;
      policy.base_lr = 0.05;
      policy.lr_scaling = edl::optim::LrScaling::kLinear;  // 1 -> 2 workers doubles the LR: k = 2
      policy.momentum_compensation = c.compensation;
      policy.compensation_steps = c.steps;
      Mlp a, b;
      test::copy_module(*a, *b);
      // a: torch SGD wrapped by edl::torch.
      ::torch::optim::SGD sgd(a->parameters(), ::torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3));
      et::DistributedOptimizerOptions to;
      to.local = true;
      to.scaling = policy;
      et::DistributedOptimizer ta(sgd, *a, to);
      // b: EDL's own SGD (v-form) on b's tensors, gradients computed by torch into fixed buffers.
      edl::DistributedOptimizerOptions eo;
      eo.local = true;
      eo.optimizer.kind = edl::OptimizerKind::kSGD;
      eo.optimizer.momentum = 0.9;
      eo.optimizer.weight_decay = 1e-3;
      eo.scaling = policy;
      edl::DistributedOptimizer eb(eo);
      for (auto& p : b->parameters()) {
        p.mutable_grad() = ::torch::zeros_like(p);
        eb.add_parameter("p", p.data_ptr<float>(), p.grad().data_ptr<float>(), static_cast<size_t>(p.numel()));
      }
      for (int s = 0; s < 18; ++s) {
        if (s == 4) {  // a worker joins: both see generation 2 with size 2
          ta.on_generation(generation(2, 2, 1));
          eb.on_generation(generation(2, 2, 1));
        }
        train_step(a, ta, data, s);
        for (auto& p : b->parameters()) p.grad().zero_();
        test::loss_on(b, data, int64_t{s} * 8, 8).backward();
        eb.step();
        CHECK(ta.reducer().rescaler().step_params().lr == eb.lr());
      }
      CHECK(sgd.param_groups()[0].options().get_lr() == Approx(0.1));
      const auto fa = test::flat(*a), fb = test::flat(*b);
      size_t bad = 0;
      for (size_t i = 0; i < fa.size(); ++i)
        if (!(std::fabs(fa[i] - fb[i]) <= 1e-6 + 1e-4 * std::fabs(fb[i]))) ++bad;
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("compensation matters: without the wrapper's adjustment the runs differ") {
  // The same scenario as above with compensation off on EDL's side but a plain torch SGD whose LR
  // is doubled by hand (u-form = full compensation at once): the parameters must differ, so the
  // test above can fail.
  ::torch::set_num_threads(1);
  const auto data = test::make_data(8 * 20);
  Mlp a, b;
  test::copy_module(*a, *b);
  ::torch::optim::SGD plain(a->parameters(), ::torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3));
  edl::DistributedOptimizerOptions eo;
  eo.local = true;
  eo.optimizer.momentum = 0.9;
  eo.optimizer.weight_decay = 1e-3;
  eo.scaling.base_lr = 0.05;
  eo.scaling.momentum_compensation = false;
  edl::DistributedOptimizer eb(eo);
  for (auto& p : b->parameters()) {
    p.mutable_grad() = ::torch::zeros_like(p);
    eb.add_parameter("p", p.data_ptr<float>(), p.grad().data_ptr<float>(), static_cast<size_t>(p.numel()));
  }
  for (int s = 0; s < 18; ++s) {
    if (s == 4) {
      plain.param_groups()[0].options().set_lr(0.1);
      eb.on_generation(generation(2, 2, 1));
    }
    plain.zero_grad();
    test::loss_on(a, data, int64_t{s} * 8, 8).backward();
    plain.step();
    for (auto& p : b->parameters()) p.grad().zero_();
    test::loss_on(b, data, int64_t{s} * 8, 8).backward();
    eb.step();
  }
  const auto fa = test::flat(*a), fb = test::flat(*b);
  double diff = 0;
  for (size_t i = 0; i < fa.size(); ++i) diff = std::max(diff, static_cast<double>(std::fabs(fa[i] - fb[i])));
  CHECK(diff > 1e-3);
}

TEST_CASE("register_state: commit / restore rolls back parameters, buffers and optimizer state") {
  ::torch::set_num_threads(1);
  const auto data = test::make_data(8 * 10);
  for (bool adam : {false, true}) {
    SECTION(adam ? "adam" : "sgd") {
      struct Net : ::torch::nn::Module {  // a BatchNorm adds buffers (running stats, an int64 counter)
        Net() : mlp(register_module("mlp", Mlp())), bn(register_module("bn", ::torch::nn::BatchNorm1d(3))) {}
        Mlp mlp;
        ::torch::nn::BatchNorm1d bn;
      };
      auto net = std::make_shared<Net>();
      std::unique_ptr<::torch::optim::Optimizer> inner;
      if (adam) {
        inner = std::make_unique<::torch::optim::Adam>(net->parameters(), ::torch::optim::AdamOptions(0.01));
      } else {
        inner = std::make_unique<::torch::optim::SGD>(net->parameters(), ::torch::optim::SGDOptions(0.05).momentum(0.9));
      }
      et::DistributedOptimizerOptions o;
      o.local = true;
      o.scaling.warmup_steps = 3;  // the rescaler's own state must follow too
      o.scaling.warmup_at_start = true;
      o.scaling.base_size = 2;
      et::DistributedOptimizer opt(*inner, *net, o);
      edl::elastic::State state;
      et::register_state(state, *net, opt);
      auto step = [&](int s) {
        opt.zero_grad();
        auto x = data.x.narrow(0, s * 8, 8), y = data.y.narrow(0, s * 8, 8);
        ::torch::mse_loss(net->bn->forward(net->mlp->forward(x)), y).backward();
        opt.step();
      };
      for (int s = 0; s < 3; ++s) step(s);
      state.commit();
      const auto committed = et::save_optimizer_state(*inner);
      std::vector<float> p_at_commit = test::flat(*net);
      auto mean_at_commit = net->bn->running_mean.clone();
      const double lr_at_commit = opt.lr();
      for (int s = 3; s < 6; ++s) step(s);
      const std::vector<float> p_after = test::flat(*net);
      REQUIRE(p_after != p_at_commit);
      state.restore();
      CHECK(test::flat(*net) == p_at_commit);
      CHECK(::torch::equal(net->bn->running_mean, mean_at_commit));
      CHECK(net->bn->num_batches_tracked.item<int64_t>() == 3);
      CHECK(et::save_optimizer_state(*inner) == committed);
      CHECK(opt.lr() == lr_at_commit);
      CHECK(opt.step_count() == 3);
      // Replaying the same steps after the restore gives bitwise the same parameters.
      for (int s = 3; s < 6; ++s) step(s);
      CHECK(test::flat(*net) == p_after);
    }
  }
}

TEST_CASE("register_state: a checkpoint file resumes a fresh module and optimizer") {
  test::checkpoint_round_trip(::torch::Device(::torch::kCPU));
}

TEST_CASE("load_optimizer_state rejects bytes that are not an optimizer archive") {
  Mlp net;
  ::torch::optim::SGD sgd(net->parameters(), ::torch::optim::SGDOptions(0.1));
  CHECK_THROWS_AS(et::load_optimizer_state(sgd, "not a zip archive"), edl::DataError);
}
