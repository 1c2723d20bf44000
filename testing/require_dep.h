// require_dep(): the one place where a Catch2 test decides what a missing dependency means
// (policy in testing/deps.h). Use it as the first statement of a test case:
//
//   edl::test::RedisServer redis;
//   if (!edl::testing::require_dep("redis-server", redis.available(), "apt-get install redis-server"))
//     return;
//
// An external program: require_program("promtool") looks it up (find_program) and names its Debian
// package from testing/deps_programs.txt in the message.
//
// present        -> true, nothing reported;
// missing        -> EDL_REQUIRE_DEPS=1: FAIL (the test case fails and stops here);
//                   otherwise: WARN "<dependency> is missing ... (skipped ...)" and false.
//
// Thread-safety: Catch2 v2 assertions: call from the test's main thread only.
#pragma once

#include <string>

#include <catch2/catch.hpp>

#include "deps.h"
#include "process.h"

namespace edl::testing {

inline bool require_dep(const std::string& dependency, bool present, const std::string& why) {
  if (present) return true;
  const std::string message = missing_dep_message(dependency, why);
  if (deps_required()) FAIL(message);
  WARN(message);
  return false;
}

// The GPU policy of the tests labelled `gpu`: present -> true; no usable GPU -> EDL_REQUIRE_GPU=1:
// FAIL; otherwise one WARN line "GPU test skipped: <why>" and false.
inline bool require_gpu(bool present, const std::string& why) {
  if (present) return true;
  if (gpu_required()) FAIL("no usable GPU (EDL_REQUIRE_GPU=1 makes this a failure): " + why);
  WARN("GPU test skipped: no usable GPU: " + why + " (EDL_REQUIRE_GPU=1 makes this a failure)");
  return false;
}

inline bool require_program(const std::string& program) {
  return require_dep(program, !find_program(program).empty(), "Debian package " + program_package(program));
}

}  // namespace edl::testing
