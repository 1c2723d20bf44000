// The goodput report: what edl-run prints at the end of a job and writes as JSON with --report PATH
// (docs/observability.md, "Goodput report"). Built from the final JobSnapshot.
// Thread-safety: pure functions.
#pragma once

#include <string>

#include "launcher/job_metrics.h"

namespace edl::launcher {

// The report as one JSON object (fields in docs/observability.md; unknown values are null).
std::string goodput_json(const JobSnapshot& s, int exit_code);

// The same as `key=value` pairs for edl-run's event line "event=report ...".
std::string goodput_line(const JobSnapshot& s);

// Writes goodput_json to `path` (through a temp file and rename); throws std::runtime_error naming
// the path when it cannot.
void write_goodput_report(const std::string& path, const JobSnapshot& s, int exit_code);

}  // namespace edl::launcher
