// The EDL_REQUIRE_DEPS policy (see deps.h). The test-support library reads its own environment
// variable: libedl's configuration (src/common/config.cc) is the library's, not the test harness's.
#include "deps.h"

#include <cstdlib>

namespace edl::testing {

bool deps_required() {
  const char* v = std::getenv("EDL_REQUIRE_DEPS");
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}

bool gpu_required() {
  const char* v = std::getenv("EDL_REQUIRE_GPU");
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}

std::string missing_dep_message(const std::string& dependency, const std::string& why) {
  std::string m = dependency + " is missing";
  if (!why.empty()) m += ": " + why;
  m += deps_required() ? " (EDL_REQUIRE_DEPS=1: a missing dependency fails; scripts/install-deps.sh installs it)"
                       : " (skipped; EDL_REQUIRE_DEPS=1 makes this a failure)";
  return m;
}

}  // namespace edl::testing
