#include "launcher/metrics_exposition.h"

#include <cmath>
#include <cstdio>
#include <limits>

namespace edl::launcher {
namespace {

using metrics::Phase;

struct Meta {
  const char* name;
  const char* type;
  const char* help;
};

// The job-wide samples, in CSV column order. Keep in step with scalar_samples and docs/observability.md.
const Meta kScalars[] = {
    {"edl_uptime_seconds", "gauge", "Seconds since edl-run started."},
    {"edl_world_size", "gauge", "Members of the newest generation."},
    {"edl_generation", "gauge", "Id of the newest generation."},
    {"edl_job_phase", "gauge", "Job phase: 0 starting, 1 rendezvous, 2 sync, 3 training, 4 recovery, 5 done."},
    {"edl_workers_reporting", "gauge", "Live local workers that have reported."},
    {"edl_restarts_total", "counter", "Failed workers restarted by this edl-run."},
    {"edl_failures_total", "counter", "Worker failures this edl-run saw (non-zero exits, dropped workers)."},
    {"edl_recoveries_total", "counter", "Generations formed after a failure."},
    {"edl_joins_total", "counter", "Workers that joined a running job (members new in a generation)."},
    {"edl_leaves_total", "counter", "Workers that left the job (members missing from the next generation)."},
    {"edl_steps_total", "counter", "Job steps run, replays included."},
    {"edl_samples_total", "counter", "Samples processed by this host's workers, replays included."},
    {"edl_samples_committed_total", "counter", "Samples of committed steps of this host's workers."},
    {"edl_steps_replayed_total", "counter", "Steps rolled back by failures and run again."},
    {"edl_steps_per_second", "gauge", "Job steps per second over the last 3 s."},
    {"edl_samples_per_second", "gauge", "Samples per second of this host's workers over the last 3 s."},
    {"edl_allreduce_bytes_total", "counter", "Allreduce payload bytes of this host's workers."},
    {"edl_allreduce_seconds_total", "counter", "Seconds this host's workers spent running allreduces."},
    {"edl_store_op_seconds_count", "counter", "Store requests of this host's workers (get/set/add/cas/del/keys/lease)."},
    {"edl_store_op_seconds_sum", "counter", "Their summed latency in seconds."},
    {"edl_recovery_seconds_sum", "counter", "Summed duration of the recoveries (histogram edl_recovery_seconds)."},
    {"edl_time_training_seconds_total", "counter", "Seconds the job was training."},
    {"edl_time_rendezvous_seconds_total", "counter", "Seconds the job was starting or in a planned rendezvous."},
    {"edl_time_sync_seconds_total", "counter", "Seconds the job was syncing state after a rendezvous."},
    {"edl_time_recovery_seconds_total", "counter", "Seconds the job was recovering from failures."},
    {"edl_mean_world_size", "gauge", "Time-weighted mean world size."},
    {"edl_effective_training_ratio", "gauge", "Training time / uptime."},
    {"edl_goodput_samples_per_second", "gauge", "Committed samples per second of uptime."},
    {"edl_goodput_ratio", "gauge", "Committed samples / what the same world sizes would do without failures (NaN = unknown)."},
    {"edl_straggler_reports_total", "counter", "Straggler reports edl-run logged (docs/observability.md, Stragglers)."},
    {"edl_recommended_world_size", "gauge", "The autoscaler's recommended world size (0 = no decision yet)."},
    {"edl_scaling_efficiency", "gauge", "The s_{k,d} behind the latest recommendation (NaN = not measured)."},
};

std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void header(std::string* out, const char* name, const char* type, const char* help) {
  *out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

// Summaries and histograms carry their own TYPE line (by base name).
bool part_of_family(const std::string& name) {
  return name == "edl_store_op_seconds_count" || name == "edl_store_op_seconds_sum" || name == "edl_recovery_seconds_sum";
}

}  // namespace

const std::vector<double>& recovery_buckets() {
  static const std::vector<double> b = {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
  return b;
}

std::string format_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 9.0e15) std::snprintf(buf, sizeof(buf), "%.0f", v);
  else std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

std::vector<std::pair<std::string, double>> scalar_samples(const JobSnapshot& s) {
  auto phase_s = [&](Phase p) { return s.phase_seconds[static_cast<int>(p)]; };
  double recovery_sum = 0;
  for (double r : s.recovery_seconds) recovery_sum += r;
  const double values[] = {
      s.uptime_seconds, double(s.world_size), double(s.generation), double(static_cast<int>(s.phase)),
      double(s.workers_reporting), double(s.restarts), double(s.failures), double(s.recovery_seconds.size()),
      double(s.joins), double(s.leaves), s.steps_total, s.samples_total, s.samples_committed, s.steps_replayed,
      s.steps_per_second, s.samples_per_second, s.allreduce_bytes, s.allreduce_seconds, s.store_ops,
      s.store_op_seconds, recovery_sum, phase_s(Phase::kTraining),
      phase_s(Phase::kStarting) + phase_s(Phase::kRendezvous), phase_s(Phase::kSync), phase_s(Phase::kRecovery),
      s.mean_world_size, s.effective_training_ratio, s.goodput_samples_per_second,
      s.goodput_ratio ? *s.goodput_ratio : std::numeric_limits<double>::quiet_NaN(), double(s.straggler_reports),
      double(s.recommended_world_size),
      s.scaling_efficiency ? *s.scaling_efficiency : std::numeric_limits<double>::quiet_NaN()};
  static_assert(sizeof(values) / sizeof(values[0]) == sizeof(kScalars) / sizeof(kScalars[0]),
                "one value per scalar metric");
  std::vector<std::pair<std::string, double>> out;
  for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); ++i) out.emplace_back(kScalars[i].name, values[i]);
  return out;
}

std::string prometheus_text(const JobSnapshot& s) {
  std::string out;
  const auto samples = scalar_samples(s);
  for (size_t i = 0; i < samples.size(); ++i) {
    if (part_of_family(samples[i].first)) continue;
    header(&out, kScalars[i].name, kScalars[i].type, kScalars[i].help);
    out += samples[i].first + " " + format_number(samples[i].second) + "\n";
  }
  // Store latency: a summary without quantiles.
  header(&out, "edl_store_op_seconds", "summary", "Latency of the store requests of this host's workers.");
  out += "edl_store_op_seconds_sum " + format_number(s.store_op_seconds) + "\n";
  out += "edl_store_op_seconds_count " + format_number(s.store_ops) + "\n";
  // Recovery time: a histogram, one observation per recovery.
  header(&out, "edl_recovery_seconds", "histogram", "Failure seen -> training again, per recovery.");
  double sum = 0;
  for (double r : s.recovery_seconds) sum += r;
  for (double le : recovery_buckets()) {
    size_t n = 0;
    for (double r : s.recovery_seconds) n += r <= le ? 1 : 0;
    out += "edl_recovery_seconds_bucket{le=\"" + format_number(le) + "\"} " + std::to_string(n) + "\n";
  }
  out += "edl_recovery_seconds_bucket{le=\"+Inf\"} " + std::to_string(s.recovery_seconds.size()) + "\n";
  out += "edl_recovery_seconds_sum " + format_number(sum) + "\n";
  out += "edl_recovery_seconds_count " + std::to_string(s.recovery_seconds.size()) + "\n";
  // Throughput per world size (the baseline of the goodput; autoscaling advice reads it too).
  header(&out, "edl_size_samples_per_second", "gauge", "Training throughput (samples/s) measured at each world size.");
  for (const auto& kv : s.per_size)
    if (kv.second.seconds > 0)
      out += "edl_size_samples_per_second{world_size=\"" + std::to_string(kv.first) + "\"} " +
             format_number(kv.second.samples / kv.second.seconds) + "\n";
  header(&out, "edl_size_training_seconds_total", "counter", "Training time at each world size.");
  for (const auto& kv : s.per_size)
    out += "edl_size_training_seconds_total{world_size=\"" + std::to_string(kv.first) + "\"} " +
           format_number(kv.second.seconds) + "\n";
  // Per worker (live local workers).
  struct PerWorker {
    const char* name;
    const char* help;
    double (*get)(const WorkerGauges&);
  };
  static const PerWorker kPerWorker[] = {
      {"edl_worker_step_seconds", "Mean step time of the worker over its last report interval.",
       [](const WorkerGauges& g) { return g.step_seconds; }},
      {"edl_worker_compute_seconds", "The compute part of it (step time minus waiting for collectives).",
       [](const WorkerGauges& g) { return g.compute_seconds; }},
      {"edl_worker_step", "The worker's State::step.", [](const WorkerGauges& g) { return double(g.step); }},
      {"edl_worker_generation", "The generation the worker is in.",
       [](const WorkerGauges& g) { return double(g.generation); }},
      {"edl_worker_rank", "The worker's rank in that generation.", [](const WorkerGauges& g) { return double(g.rank); }},
      {"edl_worker_phase", "The worker's phase (codes as edl_job_phase).",
       [](const WorkerGauges& g) { return double(static_cast<int>(g.phase)); }},
  };
  for (const auto& m : kPerWorker) {
    header(&out, m.name, "gauge", m.help);
    for (const auto& g : s.workers)
      out += std::string(m.name) + "{worker=\"" + escape_label(g.worker_id) + "\"} " + format_number(m.get(g)) + "\n";
  }
  return out;
}

std::string csv_header() {
  std::string h = "time_s";
  for (const auto& m : kScalars) h += std::string(",") + m.name;
  return h + "\n";
}

std::string csv_row(const JobSnapshot& s) {
  std::string row = format_number(std::round(s.uptime_seconds * 1000) / 1000);
  for (const auto& kv : scalar_samples(s)) {
    row += ",";
    if (!std::isnan(kv.second)) row += format_number(kv.second);  // unknown = empty cell
  }
  return row + "\n";
}

}  // namespace edl::launcher
