// The two generated documents of experiments/benchmarks_doc.cc, from one committed data set:
//   * docs/benchmarks.md: one section per bench, each with its own provenance line (commit, UTC
//     start, wall time, load, command), the reference or target figures it is measured against
//     (labelled with where they come from), its rows and figures; a bench this file does not know
//     gets a generic section (its rows as tables, split by their "bench" field), so a new bench
//     appears without code;
//   * docs/experiments.md from the template docs/experiments.md.in: every line
//     `<!-- generated:NAME -->` is replaced by the block NAME computed from the rows (tables,
//     derived figures, verdicts); an unknown NAME is an error.
//
// Thread-safety: free functions; each call writes its own outputs.
#pragma once

#include <ostream>
#include <string>

#include "doc_util.h"

namespace edl::docs {

// Writes the whole of docs/benchmarks.md to `md`; figures go through `plots`.
void write_benchmarks(std::ostream& md, const DataSet& d, Plots& plots);

// Expands the template `tmpl` (the text of docs/experiments.md.in) into `md`. Throws
// std::runtime_error naming an unknown block. `plots` must hold benchmarks.md's figures already.
void write_experiments(std::ostream& md, const std::string& tmpl, const DataSet& d, const Plots& plots);

}  // namespace edl::docs
