// docs/benchmarks.md section of scale_bench (experiments/doc_scale.cc): an elastic job of up to
// hundreds of processes (start, kill -9, join) against the targets of issue 25, with the growth
// exponent of each phase's CPU time per rank.
//
// Thread-safety: free functions; each call writes to its own stream.
#pragma once

#include <ostream>

#include "doc_util.h"

namespace edl::docs {

void scale_section(std::ostream& md, const DataSet& d, Plots& plots);
// The allreduce at 2-16 ranks before and after the sparse mesh (rows "allreduce_sparse").
void allreduce_sparse_section(std::ostream& md, const DataSet& d, Plots& plots);

}  // namespace edl::docs
