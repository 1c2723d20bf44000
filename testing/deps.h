// The dependency policy of tests: a test whose dependency (redis-server, etcd, network namespaces,
// the Fashion-MNIST package, ...) is missing FAILS when EDL_REQUIRE_DEPS=1 — scripts/test.sh and CI
// set it after installing every dependency — and may only skip in a developer's ad-hoc run.
//
// Tests call edl::testing::require_dep() / require_program() from testing/require_dep.h (Catch2); this
// part has no Catch2 so benches and tools can ask the same question.
//
// External programs: testing/deps_programs.txt lists every program that tests, benches, testing/
// helpers and scripts run, with the Debian package that provides it (scripts/install-deps.sh installs
// them; scripts/check-deps.py, ctest label deps, checks both). The table is compiled in:
// find_program(), spawn() and run_command() (process.h) refuse a program that is not listed.
//
// Thread-safety: all functions are safe from any thread.
#pragma once

#include <string>

namespace edl::testing {

// True when EDL_REQUIRE_DEPS is set to anything but "" or "0".
bool deps_required();

// True when EDL_REQUIRE_GPU is set to anything but "" or "0": a test labelled `gpu` that finds no
// usable GPU then fails instead of skipping (scripts/gpu-check.sh sets it on a GPU machine; CI has
// no GPU and leaves it unset).
bool gpu_required();

// "<dependency> is missing: <why>" plus how to get it under the policy, e.g. for a skip or failure note.
std::string missing_dep_message(const std::string& dependency, const std::string& why);

// The Debian package that provides `program` (testing/deps_programs.txt), "" when it is not listed.
std::string program_package(const std::string& program);

// Throws std::logic_error naming testing/deps_programs.txt when `program` — a bare name, or a path
// in a system directory (/usr/bin/X, /bin/X, /usr/sbin/X, /sbin/X, /usr/local/bin/X) — is not
// listed there. Other paths (programs of the build tree, a flag's value) pass.
void check_listed_program(const std::string& program);

}  // namespace edl::testing
