// Issue 22, item 5: the records a weighted step trains (set_step_samples) against the local batch the
// scaling policy plans. BatchCheck's verdicts, and the one warning a DistributedOptimizer logs.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "edl/edl.h"
#include "edl/optim.h"
#include "optim/batch_check.h"
#include "optim/rank_threads.h"

using edl::optim::BatchPlan;
using edl::optim::detail::BatchCheck;

namespace {

BatchPlan plan(int local, int size = 1) {
  BatchPlan p;
  p.size = size;
  p.local_batch = local;
  p.micro_batch = local;
  p.global_batch = local * size;
  return p;
}

// What `fn` writes to file descriptor 2 (EDL_LOG writes there with one write(2) per line).
std::string stderr_of(const std::function<void()>& fn) {
  char path[] = "/tmp/edl_batch_check_XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  const int saved = ::dup(2);
  ::dup2(fd, 2);
  try {
    fn();
  } catch (...) {
    ::dup2(saved, 2);
    ::close(saved);
    ::close(fd);
    ::unlink(path);
    throw;
  }
  ::dup2(saved, 2);
  ::close(saved);
  ::close(fd);
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  ::unlink(path);
  return ss.str();
}

size_t count_of(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("batch check: more records than planned is reported at once, naming both numbers", "[batch]") {
  BatchCheck c;
  const std::string w = c.observe(64, plan(32), 1);
  CHECK_THAT(w, Catch::Contains("trains 64 samples") && Catch::Contains("local batch of 32") &&
                    Catch::Contains("ShardOptions::batch_size") && Catch::Contains("batch_for_size"));
  CHECK(c.observe(64, plan(32), 1).empty());  // once
  CHECK(c.observe(128, plan(32), 2).empty());
}

TEST_CASE("batch check: fewer records than planned, step after step, is reported after 8 steps", "[batch]") {
  BatchCheck c;
  for (int i = 0; i < BatchCheck::kSteps - 1; ++i) CHECK(c.observe(16, plan(32), 1).empty());
  CHECK(c.observe(0, plan(32), 1).empty());  // empty steps do not count
  const std::string w = c.observe(16, plan(32), 1);
  CHECK_THAT(w, Catch::Contains("at most 16 samples") && Catch::Contains("local batch of 32"));
}

TEST_CASE("batch check: full batches with short and empty tails are fine, a new generation starts over", "[batch]") {
  BatchCheck c;
  for (int i = 0; i < 3 * BatchCheck::kSteps; ++i) {
    CHECK(c.observe(i % 5 == 4 ? 7 : 32, plan(32), 1).empty());  // a shard's short last batch
    CHECK(c.observe(0, plan(32), 1).empty());                   // an epoch's tail
  }
  // A fixed global batch of 48 at 3 workers plans 16 each: the generator's batch_for_size follows.
  for (int i = 0; i < 3 * BatchCheck::kSteps; ++i) CHECK(c.observe(16, plan(16, 3), 2).empty());
  // Short batches in one generation, then a resize before 8 of them: no verdict yet.
  for (int i = 0; i < BatchCheck::kSteps - 1; ++i) CHECK(c.observe(10, plan(32), 3).empty());
  for (int i = 0; i < BatchCheck::kSteps - 1; ++i) CHECK(c.observe(10, plan(32), 4).empty());
}

TEST_CASE("DistributedOptimizer logs one warning when set_step_samples exceeds the planned local batch", "[batch]") {
  ::setenv("EDL_LOG_LEVEL", "1", 1);  // warnings are logged at level 1 (the default): make sure it is
  edl::init();                        // the level (init() sets it from the environment)
  edl::shutdown();
  edl::DistributedOptimizerOptions o;
  o.local = true;
  o.scaling.base_lr = 0.1;  // default policy: fixed local batch of 32
  std::vector<float> w{0}, g{0};
  const std::string log = stderr_of([&] {
    edl::DistributedOptimizer opt(o);
    opt.add_parameter("w", w.data(), g.data(), 1);
    for (int s = 0; s < 4; ++s) {
      opt.set_step_samples(64);  // the shard generator's batch_size 64
      g[0] = 1;
      opt.step();
    }
  });
  CHECK(count_of(log, "trains 64 samples (set_step_samples) but the scaling policy plans a local batch of 32") == 1);
  const std::string quiet = stderr_of([&] {
    o.scaling.batch.local_batch = 64;  // agreeing
    edl::DistributedOptimizer opt(o);
    opt.add_parameter("w", w.data(), g.data(), 1);
    for (int s = 0; s < 2 * BatchCheck::kSteps; ++s) {
      opt.set_step_samples(s == 5 ? 0 : 64);
      g[0] = 1;
      opt.step();
    }
  });
  CHECK(quiet.find("DistributedOptimizer") == std::string::npos);
}

TEST_CASE("batch check: the sum over the workers (straggler rebalancing) against size x the local batch", "[batch]") {
  BatchCheck c;
  // 3 workers, a global batch of 96 split 40 / 38 / 18: each worker's count is off the plan's 32 by
  // design, their sum is not.
  for (int i = 0; i < 3 * BatchCheck::kSteps; ++i) CHECK(c.observe_global(i % 5 == 4 ? 70 : 96, plan(32, 3), 1).empty());
  const std::string w = c.observe_global(192, plan(32, 3), 1);  // the generator's batch_size 64
  CHECK_THAT(w, Catch::Contains("a step of the job trains 192 samples over its 3 worker(s)") &&
                    Catch::Contains("plans 3 x a local batch of 32 = 96") && Catch::Contains("ShardOptions::batch_size"));
  BatchCheck small;
  for (int i = 0; i < BatchCheck::kSteps - 1; ++i) CHECK(small.observe_global(48, plan(32, 3), 1).empty());
  CHECK_THAT(small.observe_global(48, plan(32, 3), 1), Catch::Contains("steps of the job trained at most 48 samples"));
}

namespace {

// What 3 rank threads' DistributedOptimizers log over 2 x kSteps weighted steps in which rank r
// trains per_rank[r] records, with EDL_REBALANCE_STRAGGLERS as given (edl::init() reads it).
std::string log_of_three_ranks(const std::vector<uint64_t>& per_rank, bool rebalance) {
  ::setenv("EDL_LOG_LEVEL", "1", 1);
  if (rebalance) ::setenv("EDL_REBALANCE_STRAGGLERS", "1", 1);
  else ::unsetenv("EDL_REBALANCE_STRAGGLERS");
  edl::init();
  std::string log;
  try {
    log = stderr_of([&] {
      edl::test::run_rank_threads(3, "bc/", std::chrono::milliseconds(30000), [&](int r, std::shared_ptr<edl::Communicator> comm) {
        edl::DistributedOptimizerOptions o;
        o.comm = comm;
        o.scaling.base_lr = 0.1;  // default policy: fixed local batch of 32
        std::vector<float> w{0}, g{0};
        edl::DistributedOptimizer opt(o);
        opt.add_parameter("w", w.data(), g.data(), 1);
        for (int s = 0; s < 2 * BatchCheck::kSteps; ++s) {
          opt.set_step_samples(per_rank[r]);
          g[0] = 1;
          opt.step();
        }
      });
    });
  } catch (...) {
    edl::shutdown();
    ::unsetenv("EDL_REBALANCE_STRAGGLERS");
    throw;
  }
  edl::shutdown();
  ::unsetenv("EDL_REBALANCE_STRAGGLERS");
  return log;
}

}  // namespace

TEST_CASE("DistributedOptimizer: rebalanced batches (EDL_REBALANCE_STRAGGLERS) are no mistake, a wrong batch_size is",
          "[batch][rebalance]") {
  // The rebalancer's split of a global batch of 3 x 32 (a slow rank 2): without rebalancing each worker's
  // count against the plan's 32 is the check, and all three are off.
  const std::vector<uint64_t> split{40, 38, 18};
  const std::string plain = log_of_three_ranks(split, false);
  CHECK(count_of(plain, "a step of this worker trains 40 samples (set_step_samples) but the scaling policy plans a "
                        "local batch of 32") == 1);
  CHECK(count_of(plain, "a step of this worker trains 38 samples") == 1);
  CHECK(count_of(plain, "the last 8 non-empty steps of this worker trained at most 18 samples each") == 1);
  CHECK(count_of(plain, "edl: DistributedOptimizer:") == 3);
  const std::string rebalanced = log_of_three_ranks(split, true);
  CHECK(rebalanced.find("DistributedOptimizer") == std::string::npos);
  // Under rebalancing the real mistake (the generator's batch_size 64 against the policy's 32) is still
  // reported, once by each worker, from the step's sum.
  const std::string wrong = log_of_three_ranks({80, 76, 36}, true);
  CHECK(count_of(wrong, "a step of the job trains 192 samples over its 3 worker(s)") == 3);
  CHECK(count_of(wrong, "edl: DistributedOptimizer:") == 3);
}
