// docs/benchmarks.md sections of chaos_bench (experiments/doc_chaos.cc): the random fault trials
// (rows of `chaos_bench`, and of `chaos_repro` in the reproducible mode) and the MTBF goodput runs (rows with "mode":"mtbf" of `chaos_mtbf` at
// MTBF 10 s and `chaos_mtbf30` at 30 s), each against the targets of issue 13 item 7.
//
// Thread-safety: free functions; each call writes to its own stream.
#pragma once

#include <ostream>
#include <string>

#include "doc_util.h"

namespace edl::docs {

// The trials of data set entry `bench` (`chaos_bench`; `chaos_repro`: the reproducible mode, whose
// trials also carry matches_reference).
void chaos_section(std::ostream& md, const DataSet& d, const std::string& bench);
// The MTBF rows of data set entry `bench`.
void chaos_mtbf_section(std::ostream& md, const DataSet& d, const std::string& bench);

}  // namespace edl::docs
