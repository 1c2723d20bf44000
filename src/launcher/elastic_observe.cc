// edl-run elastic mode, observability (docs/observability.md): logs the workers' straggler reports
// and turns rank 0's throughput samples into the autoscaling advice; with --autoscale it applies the
// recommended world size to this host's slots (started or stopped workers join or leave at a batch
// boundary). Overview: elastic_launcher.h.
#include <algorithm>
#include <cstdio>

#include "launcher/elastic_launcher.h"

namespace edl::launcher::elastic_detail {

AutoscaleOptions ElasticLauncher::autoscale_options(const LaunchOptions& o) {
  AutoscaleOptions a;
  a.threshold = o.scaling_threshold;
  a.step = o.scaling_step;
  a.interval = o.scaling_interval;
  a.min_np = std::max(o.min_np, 1);
  a.max_np = o.max_np;
  a.max_global_batch = o.max_global_batch;
  a.probe = o.autoscale;
  return a;
}

void ElasticLauncher::on_observations() {
  for (const auto& [worker, report] : watcher_->stragglers()) {
    auto it = stragglers_seen_.find(worker);
    if (it != stragglers_seen_.end() && it->second == report) continue;
    stragglers_seen_[worker] = report;
    ++straggler_reports_;
    if (metrics_) metrics_->job().on_straggler_report();
    log("event=straggler " + report);
  }
  const std::string t = watcher_->throughput();
  if (t.empty() || t == last_throughput_) return;
  last_throughput_ = t;
  auto sample = parse_throughput(t);
  if (!sample) {
    log("event=warning reason=\"malformed throughput sample '" + t + "' in " + job_.job_id + "/throughput\"");
    return;
  }
  const bool changed = autoscaler_.observe(*sample);
  const Recommendation r = autoscaler_.last();
  if (r.decision == decisions_seen_) return;  // no decision on this sample
  decisions_seen_ = r.decision;
  if (metrics_) metrics_->job().on_advice(r.world_size, r.efficiency);
  if (changed) {
    char eff[32] = "none";
    if (r.efficiency != -1) std::snprintf(eff, sizeof(eff), "%.3f", r.efficiency);
    log("event=autoscale recommended=" + std::to_string(r.world_size) + " current=" + std::to_string(r.current) +
        " gen=" + std::to_string(r.gen) + " s=" + eff + " rates=" + autoscaler_.rates_text() + " reason=\"" +
        r.reason + "\"");
  }
  apply_recommendation(r);
}

// --autoscale: moves this host's slots by the difference between the recommended and the current
// world size (capped by --max-np; never below zero local slots). Only a decision about the current
// generation is applied, at most once per generation: a late sample of an older one (rank 0
// publishes until the next generation forms) or a second decision before the change took effect
// must not move the slots again. Every decision is considered, not only changed ones: one that
// repeats a recommendation skipped as stale is applied now.
void ElasticLauncher::apply_recommendation(const Recommendation& r) {
  if (!o_.autoscale || stopping_ || finishing_ || result_ != 0 || r.world_size == r.current) return;
  if (r.gen != last_gen_ || static_cast<int>(members_.size()) != r.current || applied_gen_ == r.gen) return;
  applied_gen_ = r.gen;  // once per generation: the slots' workers join or leave into the next one
  const int target = cap(std::max(active_slots() + (r.world_size - r.current), 0));
  if (target != active_slots()) resize(target);
}

}  // namespace edl::launcher::elastic_detail
