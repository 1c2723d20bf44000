// Config::from_env: the spelling of EDL_RESET_LIMIT ("Option names" in docs/api.md): the members say
// unlimited with -1 everywhere; the variable keeps its historic 0 = unlimited and accepts -1 too.
// And the GPU path's variables (EDL_GPU_TRANSPORT, EDL_NCCL_SHRINK, docs/gpu.md), and the opt-in
// switches of the reproducible mode and straggler rebalancing.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "common/config.h"
#include "edl/error.h"

namespace {

// Config::from_env() with EDL_RESET_LIMIT set to `value` (nullptr = unset): the member, or -100 when
// the value is refused with InvalidArgument.
int reset_limit_from(const char* value) {
  if (value) setenv("EDL_RESET_LIMIT", value, 1);
  else unsetenv("EDL_RESET_LIMIT");
  int got = -100;
  try {
    got = edl::Config::from_env().reset_limit;
  } catch (const edl::InvalidArgument&) {
  }
  unsetenv("EDL_RESET_LIMIT");
  return got;
}

}  // namespace

TEST_CASE("EDL_RESET_LIMIT: unset, 0 and -1 are unlimited (-1 in Config), N is N", "[config]") {
  CHECK(reset_limit_from(nullptr) == -1);
  CHECK(reset_limit_from("0") == -1);
  CHECK(reset_limit_from("-1") == -1);
  CHECK(reset_limit_from("3") == 3);
  CHECK(reset_limit_from("-2") == -100);
  CHECK(reset_limit_from("many") == -100);
}

TEST_CASE("EDL_DETERMINISTIC and EDL_REBALANCE_STRAGGLERS: off by default, 1 turns them on, garbage is refused",
          "[config]") {
  unsetenv("EDL_DETERMINISTIC");
  unsetenv("EDL_REBALANCE_STRAGGLERS");
  edl::Config c = edl::Config::from_env();
  CHECK_FALSE(c.deterministic);
  CHECK_FALSE(c.rebalance_stragglers);
  setenv("EDL_DETERMINISTIC", "1", 1);
  setenv("EDL_REBALANCE_STRAGGLERS", "1", 1);
  c = edl::Config::from_env();
  CHECK(c.deterministic);
  CHECK(c.rebalance_stragglers);
  setenv("EDL_DETERMINISTIC", "sometimes", 1);
  CHECK_THROWS_AS(edl::Config::from_env(), edl::InvalidArgument);
  setenv("EDL_DETERMINISTIC", "1", 1);  // the reproducible mode with stop-free joins is refused, named
  setenv("EDL_JOIN", "stopfree", 1);
  CHECK_THROWS_WITH(edl::Config::from_env(), Catch::Contains("EDL_JOIN=stopfree"));
  unsetenv("EDL_JOIN");
  unsetenv("EDL_DETERMINISTIC");
  unsetenv("EDL_REBALANCE_STRAGGLERS");
}

TEST_CASE("EDL_GPU_TRANSPORT and EDL_NCCL_SHRINK: defaults, accepted values, refused values named", "[config]") {
  unsetenv("EDL_GPU_TRANSPORT");
  unsetenv("EDL_NCCL_SHRINK");
  auto c = edl::Config::from_env();
  CHECK(c.gpu_transport == "nccl");
  CHECK(c.nccl_shrink);
  setenv("EDL_GPU_TRANSPORT", "host", 1);
  setenv("EDL_NCCL_SHRINK", "0", 1);
  c = edl::Config::from_env();
  CHECK(c.gpu_transport == "host");
  CHECK_FALSE(c.nccl_shrink);
  setenv("EDL_GPU_TRANSPORT", "gloo", 1);
  CHECK_THROWS_WITH(edl::Config::from_env(), Catch::Contains("EDL_GPU_TRANSPORT='gloo'"));
  setenv("EDL_GPU_TRANSPORT", "nccl", 1);
  setenv("EDL_NCCL_SHRINK", "maybe", 1);
  CHECK_THROWS_WITH(edl::Config::from_env(), Catch::Contains("EDL_NCCL_SHRINK"));
  unsetenv("EDL_GPU_TRANSPORT");
  unsetenv("EDL_NCCL_SHRINK");
}
