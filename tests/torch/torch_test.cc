// edl::torch::DistributedOptimizer and the broadcasts, ranks as threads (issue 15, item 6):
// two ranks with batch b end with the parameters of one process with batch 2b after K steps.
// Tolerances (stated): float32 on the wire, relative 1e-4 / absolute 1e-6 after 6 steps (the two
// runs sum the batch in different orders; Adam's normalisation amplifies the last-bit differences
// of small gradients); fp16 compression: absolute 2e-3 (11-bit mantissa per gradient element).
#include "torch/torch_util.h"  // first: see the note on CHECK there

#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>

#include "edl/error.h"
#include "edl/torch.h"
#include "torch/torch_util.h"

namespace et = edl::torch;
namespace test = torch_test;
using edl::Communicator;
using edl::InvalidArgument;
using edl::MismatchError;
using torch_test::Mlp;

namespace {

constexpr int kSteps = 6, kLocal = 8;

enum class Kind { kSgd, kAdam };

std::unique_ptr<::torch::optim::Optimizer> make_optimizer(Kind kind, Mlp& net) {
  if (kind == Kind::kSgd)
    return std::make_unique<::torch::optim::SGD>(net->parameters(),
                                                 ::torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3));
  return std::make_unique<::torch::optim::Adam>(net->parameters(), ::torch::optim::AdamOptions(0.01));
}

et::DistributedOptimizerOptions options(bool fp16 = false, int accumulation = 1) {
  et::DistributedOptimizerOptions o;
  o.scaling.lr_scaling = edl::optim::LrScaling::kNone;  // the same LR in both runs: we compare the math
  o.bucket_cap_bytes = 64 * sizeof(float);         // several buckets
  o.fp16_compression = fp16;
  o.accumulation_steps = accumulation;
  return o;
}

// One process, batch ranks * kLocal, plain torch optimizer (no EDL at all).
std::vector<float> train_single(Kind kind, const Mlp& init, const test::Data& data, int ranks) {
  Mlp net;
  test::copy_module(*init, *net);
  auto opt = make_optimizer(kind, net);
  for (int s = 0; s < kSteps; ++s) {
    opt->zero_grad();
    test::loss_on(net, data, int64_t{s} * ranks * kLocal, ranks * kLocal).backward();
    opt->step();
  }
  return test::flat(*net);
}

std::vector<std::vector<float>> train_ranks(Kind kind, const Mlp& init, const test::Data& data, int ranks, bool fp16,
                                            int accumulation, const std::string& prefix) {
  std::vector<std::vector<float>> out(ranks);
  test::run_ranks(ranks, prefix, [&](int r, std::shared_ptr<Communicator> comm) {
    Mlp net;
    test::copy_module(*init, *net);
    auto inner = make_optimizer(kind, net);
    auto o = options(fp16, accumulation);
    o.comm = comm;
    et::DistributedOptimizer opt(*inner, *net, o);
    const int micro = kLocal / accumulation;
    for (int s = 0; s < kSteps; ++s) {
      opt.zero_grad();
      for (int pass = 0; pass < accumulation; ++pass)
        test::loss_on(net, data, int64_t{s} * ranks * kLocal + r * kLocal + pass * micro, micro).backward();
      opt.step();
    }
    out[r] = test::flat(*net);
  });
  return out;
}

void check_close(const std::vector<float>& a, const std::vector<float>& b, double rel, double abs) {
  REQUIRE(a.size() == b.size());
  size_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(std::fabs(a[i] - b[i]) <= abs + rel * std::fabs(b[i]))) ++bad;
  CHECK(bad == 0);
}

void check_equivalent(Kind kind, bool fp16, int accumulation, const std::string& name) {
  ::torch::set_num_threads(1);
  const int ranks = 2;
  Mlp init;
  const auto data = test::make_data(int64_t{kSteps} * ranks * kLocal);
  const auto ref = train_single(kind, init, data, ranks);
  const auto got = train_ranks(kind, init, data, ranks, fp16, accumulation, "teq/" + name + "/");
  for (const auto& g : got) check_close(g, ref, fp16 ? 0 : 1e-4, fp16 ? 2e-3 : 1e-6);
  CHECK(got[0] == got[1]);  // the same mean gradient and the same update on every rank: bitwise
  CHECK(test::l1_distance(*init, ref) > 1e-2);  // training moved the parameters: the comparison is not vacuous
}

}  // namespace

TEST_CASE("two ranks with batch b == one process with batch 2b (SGD momentum, Adam)") {
  SECTION("sgd") { check_equivalent(Kind::kSgd, false, 1, "sgd"); }
  SECTION("adam") { check_equivalent(Kind::kAdam, false, 1, "adam"); }
  SECTION("sgd, 2 accumulation passes") { check_equivalent(Kind::kSgd, false, 2, "sgd-acc2"); }
  SECTION("adam, 2 accumulation passes") { check_equivalent(Kind::kAdam, false, 2, "adam-acc2"); }
}

TEST_CASE("fp16 compression stays within the stated tolerance") {
  SECTION("sgd") { check_equivalent(Kind::kSgd, true, 1, "sgd-fp16"); }
  SECTION("adam") { check_equivalent(Kind::kAdam, true, 2, "adam-fp16"); }
}

TEST_CASE("the reduction overlaps backward: buckets are launched from the autograd hooks") {
  ::torch::set_num_threads(1);
  const auto data = test::make_data(64);
  test::run_ranks(2, "toverlap/", [&](int r, std::shared_ptr<Communicator> comm) {
    Mlp net(6, 64, 3);
    ::torch::optim::SGD sgd(net->parameters(), ::torch::optim::SGDOptions(0.01));
    auto o = options();
    o.comm = comm;
    et::DistributedOptimizer opt(sgd, *net, o);
    test::loss_on(net, data, r * 8, 8).backward();
    opt.step();
    const auto& st = opt.reducer().last_step_stats();
    if (st.buckets < 2) throw std::runtime_error("expected several buckets, got " + std::to_string(st.buckets));
  });
}

TEST_CASE("a parameter without a gradient takes part with zeros (Horovod), p.grad() = mean over ranks") {
  ::torch::set_num_threads(1);
  Mlp init;
  const auto data = test::make_data(16);
  std::vector<std::vector<float>> fc2_grad(2);
  std::vector<bool> defined(2);
  test::run_ranks(2, "tunused/", [&](int r, std::shared_ptr<Communicator> comm) {
    Mlp net;
    test::copy_module(*init, *net);
    ::torch::optim::SGD sgd(net->parameters(), ::torch::optim::SGDOptions(0.0));  // lr 0: look at p.grad
    auto o = options();
    o.comm = comm;
    et::DistributedOptimizer opt(sgd, *net, o);
    opt.zero_grad();
    if (r == 0) {
      test::loss_on(net, data, 0, 8).backward();
    } else {  // rank 1 uses fc1 only: fc2 gets no gradient
      net->fc1->forward(data.x.narrow(0, 8, 8)).pow(2).mean().backward();
    }
    opt.step();
    defined[r] = net->fc2->weight.grad().defined();
    auto g = net->fc2->weight.grad().contiguous();
    fc2_grad[r].assign(g.data_ptr<float>(), g.data_ptr<float>() + g.numel());
  });
  CHECK(defined[0]);
  CHECK(defined[1]);
  CHECK(fc2_grad[0] == fc2_grad[1]);
  // The mean is rank 0's gradient over 2: compute rank 0's alone.
  Mlp alone;
  test::copy_module(*init, *alone);
  test::loss_on(alone, data, 0, 8).backward();
  auto g0 = alone->fc2->weight.grad().contiguous();
  for (int64_t i = 0; i < g0.numel(); ++i) CHECK(fc2_grad[0][i] == Approx(g0.data_ptr<float>()[i] / 2).margin(1e-7));
}

TEST_CASE("parameters whose shapes differ across ranks fail with MismatchError on every rank, not a hang") {
  ::torch::set_num_threads(1);
  const auto data = test::make_data(16);
  SECTION("different hidden width") {
    std::vector<std::string> errors(2);
    test::run_ranks(2, "tmis1/", [&](int r, std::shared_ptr<Communicator> comm) {
      Mlp net(6, r == 0 ? 12 : 13, 3);
      ::torch::optim::SGD sgd(net->parameters(), ::torch::optim::SGDOptions(0.1));
      auto o = options();
      o.comm = comm;
      et::DistributedOptimizer opt(sgd, *net, o);
      try {
        test::loss_on(net, data, r * 8, 8).backward();
        opt.step();
      } catch (const MismatchError& e) {
        errors[r] = e.what();
      }
    });
    CHECK_THAT(errors[0], Catch::Contains("different parameters"));
    CHECK_THAT(errors[1], Catch::Contains("different parameters"));
  }
  SECTION("same element count, transposed shape") {
    std::vector<std::string> errors(2);
    test::run_ranks(2, "tmis2/", [&](int r, std::shared_ptr<Communicator> comm) {
      auto w = ::torch::randn(r == 0 ? std::vector<int64_t>{4, 3} : std::vector<int64_t>{3, 4}).requires_grad_();
      ::torch::optim::SGD sgd(std::vector<::torch::Tensor>{w}, ::torch::optim::SGDOptions(0.1));
      auto o = options();
      o.comm = comm;
      et::DistributedOptimizer opt(sgd, {{"w", w}}, o);
      try {
        w.sum().backward();
        opt.step();
      } catch (const MismatchError& e) {
        errors[r] = e.what();
      }
    });
    CHECK_THAT(errors[0], Catch::Contains("different names or shapes"));
    CHECK_THAT(errors[1], Catch::Contains("different names or shapes"));
  }
  SECTION("broadcast_parameters") {
    std::vector<std::string> errors(2);
    test::run_ranks(2, "tmis3/", [&](int r, std::shared_ptr<Communicator> comm) {
      Mlp net(6, r == 0 ? 12 : 13, 3);
      try {
        et::broadcast_parameters(*net, 0, comm);
      } catch (const MismatchError& e) {
        errors[r] = e.what();
      }
    });
    CHECK_THAT(errors[0], Catch::Contains("broadcast_parameters"));
    CHECK_THAT(errors[1], Catch::Contains("broadcast_parameters"));
  }
}

TEST_CASE("broadcast_parameters and broadcast_optimizer_state give every rank root's state") {
  ::torch::set_num_threads(1);
  const auto data = test::make_data(32);
  std::vector<std::vector<float>> params(3), momenta(3);
  std::vector<double> lrs(3);
  test::run_ranks(3, "tbcast/", [&](int r, std::shared_ptr<Communicator> comm) {
    Mlp net;  // every thread initialises its own random parameters
    ::torch::optim::SGD sgd(net->parameters(), ::torch::optim::SGDOptions(0.1 * (r + 1)).momentum(0.9));
    if (r == 1) {  // the root has momentum state and another LR
      sgd.zero_grad();
      test::loss_on(net, data, 0, 8).backward();
      sgd.step();
    }
    et::broadcast_parameters(*net, 1, comm);
    et::broadcast_optimizer_state(sgd, 1, comm);
    params[r] = test::flat(*net);
    auto& state = sgd.state();
    auto it = state.find(c10::guts::to_string(net->fc1->weight.unsafeGetTensorImpl()));
    if (it != state.end()) {
      auto buf = static_cast<::torch::optim::SGDParamState&>(*it->second).momentum_buffer().contiguous();
      momenta[r].assign(buf.data_ptr<float>(), buf.data_ptr<float>() + buf.numel());
    }
    lrs[r] = sgd.param_groups()[0].options().get_lr();
  });
  CHECK(params[0] == params[1]);
  CHECK(params[2] == params[1]);
  REQUIRE_FALSE(momenta[1].empty());
  CHECK(momenta[0] == momenta[1]);
  CHECK(momenta[2] == momenta[1]);
  CHECK(lrs[0] == Approx(0.2));
  CHECK(lrs[2] == Approx(0.2));
}

TEST_CASE("misuse is InvalidArgument") {
  Mlp net;
  auto d = ::torch::randn({3}, ::torch::kFloat64).requires_grad_();
  ::torch::optim::SGD sgd(std::vector<::torch::Tensor>{d}, ::torch::optim::SGDOptions(0.1));
  et::DistributedOptimizerOptions o;
  o.local = true;
  CHECK_THROWS_AS(et::DistributedOptimizer(sgd, {{"d", d}}, o), InvalidArgument);       // float64
  CHECK_THROWS_AS(et::DistributedOptimizer(sgd, *net, o), InvalidArgument);             // not the module's
  o.accumulation_steps = 0;
  ::torch::optim::SGD ok(net->parameters(), ::torch::optim::SGDOptions(0.1));
  CHECK_THROWS_AS(et::DistributedOptimizer(ok, *net, o), InvalidArgument);
  o.accumulation_steps = 1;
  o.bf16_compression = true;  // CUDA parameters only
  CHECK_THROWS_AS(et::DistributedOptimizer(ok, *net, o), InvalidArgument);
}

TEST_CASE("training_device: cpu, cuda only with CUDA support and a device, nothing else") {
  CHECK(et::training_device("cpu") == ::torch::Device(::torch::kCPU));
  CHECK_THROWS_AS(et::training_device("tpu"), InvalidArgument);
  if (!::torch::cuda::is_available()) CHECK_THROWS_AS(et::training_device("cuda"), InvalidArgument);
}
