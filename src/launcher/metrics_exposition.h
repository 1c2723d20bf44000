// The job metrics as text: the Prometheus text exposition format (version 0.0.4) served at
// /metrics, and the CSV rows of --metrics-file. Both come from one JobSnapshot and one table of
// job-wide samples (scalar_samples), so the CSV columns are exactly the unlabelled Prometheus
// samples; the labelled ones (per worker, per world size, histogram buckets) are Prometheus-only.
// Every metric and its meaning: docs/observability.md, "Metrics".
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "launcher/job_metrics.h"

namespace edl::launcher {

// Upper bounds of the edl_recovery_seconds histogram buckets (+Inf is implied).
const std::vector<double>& recovery_buckets();

// (name, value) of every job-wide sample, in a fixed order. NaN = unknown (edl_goodput_ratio).
std::vector<std::pair<std::string, double>> scalar_samples(const JobSnapshot& s);

std::string prometheus_text(const JobSnapshot& s);

// The CSV header ("time_s," + the sample names) and one row of values for `s`.
std::string csv_header();
std::string csv_row(const JobSnapshot& s);

// A number as Prometheus writes it: integers without a fraction, NaN, +Inf, -Inf.
std::string format_number(double v);

}  // namespace edl::launcher
