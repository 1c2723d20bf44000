// The EDL_REQUIRE_DEPS policy (see deps.h). The test-support library reads its own environment
// variable: libedl's configuration (src/common/config.cc) is the library's, not the test harness's.
#include "deps.h"

#include <cstdlib>
#include <map>
#include <stdexcept>

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

namespace {

// program -> Debian package, generated from testing/deps_programs.txt at configure time.
const std::map<std::string, std::string>& programs() {
  static const std::map<std::string, std::string> table = {
#include "deps_programs.inc"
  };
  return table;
}

// "X" for a bare name or a path in a system directory, "" for any other path.
std::string listed_name(const std::string& program) {
  if (program.find('/') == std::string::npos) return program;
  for (const char* dir : {"/usr/local/bin/", "/usr/local/sbin/", "/usr/bin/", "/usr/sbin/", "/bin/", "/sbin/"}) {
    const std::string d = dir;
    if (program.compare(0, d.size(), d) == 0 && program.find('/', d.size()) == std::string::npos)
      return program.substr(d.size());
  }
  return "";
}

}  // namespace

std::string program_package(const std::string& program) {
  auto it = programs().find(listed_name(program));
  return it == programs().end() ? "" : it->second;
}

void check_listed_program(const std::string& program) {
  const std::string name = listed_name(program);
  if (name.empty() || programs().count(name)) return;
  throw std::logic_error("program '" + program +
                         "' is not listed in testing/deps_programs.txt: add it with the Debian package that "
                         "provides it, and that package to scripts/install-deps.sh (scripts/check-deps.py)");
}

}  // namespace edl::testing
