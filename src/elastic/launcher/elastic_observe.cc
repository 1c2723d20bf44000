// edl-run elastic mode, observability (docs/observability.md): logs the workers' straggler reports
// and turns rank 0's throughput samples into the autoscaling advice; with --autoscale it applies the
// recommended world size to this host's slots (started or stopped workers join or leave at a batch
// boundary). Overview: elastic_launcher.h.
#include <algorithm>
#include <cstdio>

#include "elastic/launcher/elastic_launcher.h"

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
  if (!autoscaler_.observe(*sample)) return;
  const Recommendation r = autoscaler_.last();
  char eff[32] = "none";
  if (r.efficiency != -1) std::snprintf(eff, sizeof(eff), "%.3f", r.efficiency);
  log("event=autoscale recommended=" + std::to_string(r.world_size) + " current=" + std::to_string(r.current) +
      " gen=" + std::to_string(r.gen) + " s=" + eff + " rates=" + autoscaler_.rates_text() + " reason=\"" +
      r.reason + "\"");
  apply_recommendation(r);
}

// --autoscale: moves this host's slots by the difference between the recommended and the current
// world size (capped by --max-np; never below zero local slots).
void ElasticLauncher::apply_recommendation(const Recommendation& r) {
  if (!o_.autoscale || stopping_ || finishing_ || result_ != 0 || r.world_size == r.current) return;
  const int target = cap(std::max(active_slots() + (r.world_size - r.current), 0));
  if (target != active_slots()) resize(target);
}

}  // namespace edl::launcher::elastic_detail
