// edl::torch in a world of one and across resizes (issue 15, item 7): a world of one uses p.grad()
// in place (no copy into EDL's buckets, no copy back) and must train bitwise like the plain torch
// optimizer — SGD with momentum and Adam, gradient accumulation, weighted steps (an empty step
// changes nothing), a parameter without a gradient — whether the world of one is `local` or a
// Communicator of size 1; and a world that shrinks from 2 ranks to 1 and grows back to 2 keeps
// training correctly (the step decides per communicator whether to copy).
#include "torch/torch_util.h"  // first: see the note on CHECK there

#include <catch2/catch.hpp>

#include <cmath>
#include <thread>

#include "edl/torch.h"
#include "torch/torch_util.h"

namespace et = edl::torch;
namespace test = torch_test;
using torch_test::Mlp;

namespace {

constexpr int kSteps = 7, kBatch = 8;

std::unique_ptr<::torch::optim::Optimizer> make_optimizer(bool adam, Mlp& net) {
  if (adam) return std::make_unique<::torch::optim::Adam>(net->parameters(), ::torch::optim::AdamOptions(0.01));
  return std::make_unique<::torch::optim::SGD>(net->parameters(),
                                               ::torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3));
}

// Step s's loss on pass `pass` of `passes` (rows of step s split into equal micro-batches).
::torch::Tensor micro_loss(Mlp& net, const test::Data& data, int s, int pass, int passes) {
  const int micro = kBatch / passes;
  return test::loss_on(net, data, int64_t{s} * kBatch + pass * micro, micro);
}

// Step 3 is an empty weighted step (no rank had a record): the parameters must not move.
constexpr int kEmptyStep = 3;

// The plain torch optimizer: passes summed by libtorch, divided by the passes (the same multiply
// edl::torch applies), the empty step skipped; fc2.bias is frozen on odd steps (no gradient: EDL
// gives it a zero gradient, so the reference does too).
std::vector<float> train_plain(bool adam, const Mlp& init, const test::Data& data, int passes) {
  Mlp net;
  test::copy_module(*init, *net);
  auto opt = make_optimizer(adam, net);
  for (int s = 0; s < kSteps; ++s) {
    opt->zero_grad();
    net->fc2->bias.set_requires_grad(s % 2 == 0);
    for (int pass = 0; pass < passes; ++pass) micro_loss(net, data, s, pass, passes).backward();
    net->fc2->bias.set_requires_grad(true);
    if (s == kEmptyStep) continue;
    ::torch::NoGradGuard no_grad;
    for (auto& p : net->parameters()) {
      if (!p.grad().defined()) {
        p.mutable_grad() = ::torch::zeros_like(p);
      } else if (passes > 1) {
        p.mutable_grad().mul_(1.0 / passes);
      }
    }
    opt->step();
  }
  return test::flat(*net);
}

// The same through edl::torch in a world of one (`comm` null: local = true).
std::vector<float> train_edl(bool adam, const Mlp& init, const test::Data& data, int passes,
                             std::shared_ptr<edl::Communicator> comm, bool* slots_untouched) {
  Mlp net;
  test::copy_module(*init, *net);
  auto inner = make_optimizer(adam, net);
  et::DistributedOptimizerOptions o;  // default rescaling: linear from base size 1 = the same LR
  o.local = comm == nullptr;
  o.comm = comm;
  o.accumulation_steps = passes;
  o.bucket_cap_bytes = 64 * sizeof(float);
  et::DistributedOptimizer opt(*inner, *net, o);
  for (int s = 0; s < kSteps; ++s) {
    opt.zero_grad();
    opt.set_step_samples(s == kEmptyStep ? 0 : kBatch);
    net->fc2->bias.set_requires_grad(s % 2 == 0);
    for (int pass = 0; pass < passes; ++pass) micro_loss(net, data, s, pass, passes).backward();
    net->fc2->bias.set_requires_grad(true);
    opt.step();
  }
  REQUIRE(opt.step_count() == kSteps);  // the empty step counts
  *slots_untouched = true;               // in place: nothing was copied into EDL's buckets
  for (size_t i = 0; i < opt.num_parameters(); ++i) {
    const float* slot = opt.reducer().grad_slot(i);
    const auto n = static_cast<size_t>(net->parameters()[i].numel());
    for (size_t k = 0; k < n; ++k) *slots_untouched = *slots_untouched && slot[k] == 0.0f;
  }
  return test::flat(*net);
}

void check_world_of_one(bool adam, int passes, bool with_comm) {
  ::torch::set_num_threads(1);
  Mlp init;
  const auto data = test::make_data(int64_t{kSteps} * kBatch);
  const auto ref = train_plain(adam, init, data, passes);
  std::vector<float> got;
  bool untouched = false;
  if (with_comm) {
    test::run_ranks(1, std::string("tone/") + (adam ? "adam" : "sgd") + std::to_string(passes) + "/",
                    [&](int, std::shared_ptr<edl::Communicator> comm) {
                      got = train_edl(adam, init, data, passes, comm, &untouched);
                    });
  } else {
    got = train_edl(adam, init, data, passes, nullptr, &untouched);
  }
  CHECK(got == ref);  // bitwise
  CHECK(untouched);
  CHECK(test::l1_distance(*init, ref) > 1e-2);  // training moved the parameters: the comparison is not vacuous
}

}  // namespace

TEST_CASE("a world of one trains bitwise like the plain torch optimizer (gradients used in place)") {
  SECTION("sgd, local") { check_world_of_one(false, 1, false); }
  SECTION("adam, local") { check_world_of_one(true, 1, false); }
  SECTION("sgd, 2 accumulation passes, local") { check_world_of_one(false, 2, false); }
  SECTION("adam, 4 accumulation passes, local") { check_world_of_one(true, 4, false); }
  SECTION("sgd, 2 accumulation passes, a communicator of size 1") { check_world_of_one(false, 2, true); }
  SECTION("adam, a communicator of size 1") { check_world_of_one(true, 1, true); }
}

// Ranks as threads over one memory store: 2 ranks train 3 steps, rank 1 leaves (rank 0 goes on
// alone on a communicator of size 1 for 3 steps), rank 1 comes back (rank 0's parameters and
// optimizer state are broadcast to it) and both train 3 more steps. The reference is one plain
// process with batch 2b, b (rank 0's rows only) and 2b. LR scaling off: the math is compared.
TEST_CASE("a world that shrinks from 2 ranks to 1 and grows back trains like one process") {
  ::torch::set_num_threads(1);
  constexpr int kPhase = 3;
  Mlp init;
  const auto data = test::make_data(int64_t{3 * kPhase} * 2 * kBatch);
  auto rows = [](int step, int rank) { return int64_t{step} * 2 * kBatch + rank * kBatch; };
  // Reference.
  Mlp ref_net;
  test::copy_module(*init, *ref_net);
  auto ref_opt = make_optimizer(false, ref_net);
  for (int s = 0; s < 3 * kPhase; ++s) {
    const bool alone = s >= kPhase && s < 2 * kPhase;
    ref_opt->zero_grad();
    test::loss_on(ref_net, data, rows(s, 0), alone ? kBatch : 2 * kBatch).backward();
    ref_opt->step();
  }
  const auto ref = test::flat(*ref_net);

  auto store = edl::make_memory_store();
  auto make_comm = [&](const std::string& prefix, int rank, int size, uint64_t generation) {
    edl::CommunicatorOptions co;
    co.timeout = std::chrono::milliseconds(20000);
    co.connect_timeout = std::chrono::milliseconds(20000);
    co.generation = generation;
    return edl::Communicator::create(store, prefix, rank, size, co);
  };
  std::vector<std::vector<float>> out(2);
  std::vector<std::exception_ptr> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        Mlp net;
        test::copy_module(*init, *net);
        auto inner = make_optimizer(false, net);
        et::DistributedOptimizerOptions o;
        o.scaling.lr_scaling = edl::optim::LrScaling::kNone;
        o.bucket_cap_bytes = 64 * sizeof(float);
        o.comm = make_comm("tshrink/a/", r, 2, 1);
        et::DistributedOptimizer opt(*inner, *net, o);
        auto train = [&](int s) {
          opt.zero_grad();
          test::loss_on(net, data, rows(s, r), kBatch).backward();
          opt.step();
        };
        for (int s = 0; s < kPhase; ++s) train(s);
        if (r == 0) {  // alone
          opt.set_communicator(make_comm("tshrink/b/", 0, 1, 2));
          for (int s = kPhase; s < 2 * kPhase; ++s) train(s);
        }
        auto both = make_comm("tshrink/c/", r, 2, 3);
        et::broadcast_parameters(*net, 0, both);
        et::broadcast_optimizer_state(*inner, 0, both);
        opt.set_communicator(both);
        for (int s = 2 * kPhase; s < 3 * kPhase; ++s) train(s);
        out[r] = test::flat(*net);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  CHECK(out[0] == out[1]);
  REQUIRE(out[0].size() == ref.size());
  size_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i)
    if (!(std::fabs(out[0][i] - ref[i]) <= 1e-6 + 1e-4 * std::fabs(ref[i]))) ++bad;
  CHECK(bad == 0);  // float32 sums in another order: relative 1e-4 / absolute 1e-6, as torch_test
}
