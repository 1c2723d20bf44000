// docs/benchmarks.md sections of issue 26's opt-in modes (experiments/doc_modes.cc): straggler
// rebalancing against waiting and eviction (rows of `rebalance_bench`) and what the reproducible
// mode costs next to the normal mode (rows of `reproducible_bench`), each against its target.
//
// Thread-safety: free functions; each call writes to its own stream.
#pragma once

#include <ostream>

#include "doc_util.h"

namespace edl::docs {

void rebalance_section(std::ostream& md, const DataSet& d, Plots& plots);
void reproducible_section(std::ostream& md, const DataSet& d, Plots& plots);

}  // namespace edl::docs
