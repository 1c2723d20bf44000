// Test helper: edl-run's command-line parser in-process (parse_command_line on an argv built from
// strings), for the tests of flags and their checks. Thread-safety: pure function.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/options.h"

namespace edl::test {

// Parses "edl-run ARGS..."; nullopt when edl-run refuses them (a UsageError: exit 2).
inline std::optional<launcher::LaunchOptions> parse_launch_options(std::vector<std::string> args) {
  args.insert(args.begin(), "edl-run");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  launcher::LaunchOptions o;
  std::string help;
  try {
    launcher::parse_command_line(static_cast<int>(argv.size()), argv.data(), &o, &help);
  } catch (const launcher::UsageError&) {
    return std::nullopt;
  }
  return o;
}

}  // namespace edl::test
