// docs/benchmarks.md sections of the GPU benches (experiments/doc_gpu.cc): gpu_allreduce_bench
// (docs/gpu.md) against the targets of issue 23, and the edl::torch GPU checks (docs/torch.md).
// Rows come from a device-tool call (one GPU lent to a session); several ranks share that GPU.
//
// Thread-safety: free functions; each call writes to its own stream.
#pragma once

#include <ostream>

#include "doc_util.h"

namespace edl::docs {

void gpu_allreduce_section(std::ostream& md, const DataSet& d, Plots& plots);

}  // namespace edl::docs
