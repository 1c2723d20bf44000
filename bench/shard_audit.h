// shard_audit's two drivers (see shard_audit.cc): the audit result, and the processes mode.
// Thread-safety: one driver at a time, from main().
#pragma once

#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "testing/shard_sim.h"

namespace edl::bench {

struct Audit {
  std::vector<edl::testing::EpochAudit> epochs;
  int kills = 0, joins = 0, leaves = 0, restarts = 0;
  std::string error;
};

// --mode processes: edl-run in elastic mode with shard_audit_worker; kills, joins, graceful leaves
// and whole-job restarts injected while it trains; then the workers' committed counters audited.
Audit run_processes(const cxxopts::ParseResult& a, const std::string& self);

}  // namespace edl::bench
