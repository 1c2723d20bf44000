// Issue 22, item 7: the empty / short step recipe of edl::torch (docs/torch.md, "Empty and short
// steps"), ranks as threads: every rank calls set_step_samples(n) and step() every step, a rank with no
// record skips forward and backward, and the result is the one-process step over the union of the
// ranks' records; a step in which no rank had a record moves nothing (parameters, momentum).
#include "torch/torch_util.h"  // first: see the note on CHECK there

#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <vector>

#include "edl/torch.h"

namespace et = edl::torch;
namespace test = torch_test;
using edl::Communicator;
using torch_test::Mlp;

namespace {

// Records per step of rank 0 and rank 1: full, short, empty on one rank, empty on both.
constexpr std::array<std::array<int64_t, 2>, 7> kSchedule = {{{4, 4}, {3, 5}, {0, 4}, {2, 0}, {0, 0}, {4, 1}, {4, 4}}};

int64_t offset_of(size_t step) {
  int64_t off = 0;
  for (size_t s = 0; s < step; ++s) off += kSchedule[s][0] + kSchedule[s][1];
  return off;
}

::torch::optim::SGDOptions sgd_options() { return ::torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3); }

// One process, plain libtorch: each step trains the union of the ranks' records as one batch; a step
// without records is skipped altogether (no torch step: momentum does not move either).
std::vector<float> train_single(const Mlp& init, const test::Data& data) {
  Mlp net;
  test::copy_module(*init, *net);
  ::torch::optim::SGD sgd(net->parameters(), sgd_options());
  for (size_t s = 0; s < kSchedule.size(); ++s) {
    const int64_t n = kSchedule[s][0] + kSchedule[s][1];
    if (n == 0) continue;
    sgd.zero_grad();
    test::loss_on(net, data, offset_of(s), n).backward();
    sgd.step();
  }
  return test::flat(*net);
}

}  // namespace

TEST_CASE("empty and short steps: set_step_samples(n) + step() on every rank == one process on the union") {
  ::torch::set_num_threads(1);
  Mlp init;
  const auto data = test::make_data(64);
  const auto ref = train_single(init, data);
  std::vector<std::vector<float>> got(2), after_empty(2), before_empty(2);
  test::run_ranks(2, "tsteps/", [&](int r, std::shared_ptr<Communicator> comm) {
    Mlp net;
    test::copy_module(*init, *net);
    ::torch::optim::SGD sgd(net->parameters(), sgd_options());
    et::DistributedOptimizerOptions o;
    o.scaling.lr_scaling = edl::optim::LrScaling::kNone;  // compare the math at one LR
    o.bucket_cap_bytes = 64 * sizeof(float);
    o.comm = comm;
    et::DistributedOptimizer opt(sgd, *net, o);
    for (size_t s = 0; s < kSchedule.size(); ++s) {
      const int64_t n = kSchedule[s][r];
      if (kSchedule[s][0] + kSchedule[s][1] == 0) before_empty[r] = test::flat(*net);
      opt.zero_grad();
      opt.set_step_samples(static_cast<uint64_t>(n));  // every rank, every step, before backward
      if (n > 0) test::loss_on(net, data, offset_of(s) + (r == 0 ? 0 : kSchedule[s][0]), n).backward();
      opt.step();  // every rank, also with nothing to train: the same collectives everywhere
      if (kSchedule[s][0] + kSchedule[s][1] == 0) after_empty[r] = test::flat(*net);
    }
    got[r] = test::flat(*net);
  });
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK(after_empty[r] == before_empty[r]);  // no record anywhere: nothing moved
    REQUIRE(got[r].size() == ref.size());
    size_t bad = 0;
    for (size_t i = 0; i < ref.size(); ++i)
      if (!(std::fabs(got[r][i] - ref[i]) <= 1e-6 + 1e-4 * std::fabs(ref[i]))) ++bad;
    CHECK(bad == 0);
  }
  CHECK(got[0] == got[1]);
  CHECK(test::l1_distance(*init, ref) > 1e-2);  // training moved the parameters
}
