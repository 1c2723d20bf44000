#include "launcher/job_metrics.h"

#include <algorithm>
#include <cmath>

namespace edl::launcher {

using metrics::Phase;

namespace {

double seconds_between(MetricsClock::time_point a, MetricsClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// How much a worker in phase p holds the job up (higher = the job is in that phase).
int weight(Phase p) {
  switch (p) {
    case Phase::kRecovery: return 5;
    case Phase::kStarting:
    case Phase::kRendezvous: return 4;
    case Phase::kSync: return 3;
    case Phase::kTraining: return 2;
    case Phase::kDone: return 1;
  }
  return 0;
}

}  // namespace

JobMetrics::JobMetrics(MetricsClock::time_point start) : start_(start), last_(start) {}

// A member's failure seen by edl-run counts as recovery at once (the survivors may still be blocked
// in a collective with the dead peer, reporting "training") until the job trains in a newer generation.
Phase JobMetrics::job_phase() const {
  uint64_t newest = 0;
  const Phase p = workers_phase(&newest);
  if (failed_at_ && p != Phase::kDone) return Phase::kRecovery;
  return p;
}

// The phase from the workers' reports alone; *newest = the newest generation they report.
Phase JobMetrics::workers_phase(uint64_t* newest_out) const {
  uint64_t newest = 0;
  bool any = false, done = false;
  for (const auto& kv : workers_) {
    if (!kv.second.reported) continue;
    done = done || static_cast<Phase>(kv.second.last.phase) == Phase::kDone;
    if (!kv.second.live) continue;
    newest = std::max(newest, kv.second.last.generation);
    any = true;
  }
  if (!any) {  // every worker gone (or none reported yet): finished, failed, or not started
    if (last_phase_ == Phase::kDone || done) return Phase::kDone;
    return trained_ ? Phase::kRecovery : Phase::kStarting;
  }
  *newest_out = newest;
  Phase worst = Phase::kDone;
  for (const auto& kv : workers_) {
    const Worker& w = kv.second;
    if (!w.live || !w.reported || w.last.generation != newest) continue;
    const Phase p = static_cast<Phase>(w.last.phase);
    if (weight(p) > weight(worst)) worst = p;
  }
  return worst;
}

// Integrates time up to `now` with the phase and world size that held since the last call.
void JobMetrics::integrate(MetricsClock::time_point now) {
  if (now <= last_) return;
  const double dt = seconds_between(last_, now);
  last_ = now;
  const Phase p = job_phase();
  last_phase_ = p;
  totals_.phase_seconds[static_cast<int>(p)] += dt;
  const int size = totals_.world_size;
  if (size > 0) {
    size_seconds_ += size * dt;
    sized_seconds_ += dt;
  }
  if (p == Phase::kTraining) trained_ = true;
  if (size > 0 && trained_ && p != Phase::kDone) {
    SizeThroughput& t = totals_.per_size[size];
    t.wall_seconds += dt;
    if (p == Phase::kTraining) t.seconds += dt;
  }
}

// A report's steps count 1/n each, n = this host's members of its generation (started by this
// edl-run, reported yet or not): every member runs every step, so the job's step counter advances
// once per step (docs/observability.md). A report of an older generation than the newest known
// uses its world size (one host).
double JobMetrics::steps_divisor(const metrics::WorkerReport& r) const {
  int n = 0;
  if (r.generation == totals_.generation)
    for (const auto& m : members_) n += workers_.count(m) ? 1 : 0;
  if (n == 0) n = r.world_size;
  return std::max(n, 1);
}

void JobMetrics::on_report(const metrics::WorkerReport& r, MetricsClock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  integrate(now);
  Worker& w = workers_[r.worker_id];
  if (w.reported && r.seq <= w.last.seq) return;  // out of order (datagrams may be reordered)
  const metrics::WorkerReport prev = w.reported ? w.last : metrics::WorkerReport{};
  w.last = r;
  w.reported = true;
  const double dsteps = static_cast<double>(r.steps - std::min(r.steps, prev.steps));
  const double dsamples = static_cast<double>(r.samples - std::min(r.samples, prev.samples));
  const double job_steps = dsteps / steps_divisor(r);
  totals_.steps_total += job_steps;
  totals_.samples_total += dsamples;
  // Steps are only run while training: whenever their report arrives, they belong to the training
  // time at the world size of the generation they ran in.
  const int size = r.world_size > 0 ? r.world_size : totals_.world_size;
  if (size > 0 && dsteps > 0) {
    SizeThroughput& t = totals_.per_size[size];
    t.steps += job_steps;
    t.samples += dsamples;
  }
  if (r.timed_steps > prev.timed_steps) {
    const double n = static_cast<double>(r.timed_steps - prev.timed_steps);
    w.step_seconds = (r.step_seconds - prev.step_seconds) / n;
    w.compute_seconds = (r.compute_seconds - prev.compute_seconds) / n;
  }
  if (failed_at_) {  // the end of a recovery edl-run saw begin: the job trains in a newer generation
    uint64_t newest = 0;
    if (workers_phase(&newest) == Phase::kTraining && newest > failed_gen_) {
      Recovery& rec = recoveries_[newest];
      rec.seconds = std::max(rec.seconds, seconds_between(*failed_at_, now));
      failed_at_.reset();
    }
  }
  const uint32_t have = std::min<uint32_t>(r.recoveries, metrics::kRecentRecoveries);
  for (uint32_t i = 0; i < have; ++i) {
    const metrics::RecoveryRecord& rec = r.recent[i];
    auto it = recoveries_.find(rec.generation);
    if (it == recoveries_.end()) {
      recoveries_[rec.generation] = Recovery{rec.seconds, rec.steps_replayed};
    } else {  // every survivor reports the same recovery: the job waited for the slowest
      it->second.seconds = std::max(it->second.seconds, rec.seconds);
      it->second.steps_replayed = std::max(it->second.steps_replayed, rec.steps_replayed);
    }
  }
  record_rates(now);
}

void JobMetrics::record_rates(MetricsClock::time_point now) {
  history_.push_back({now, {totals_.steps_total, totals_.samples_total}});
  while (history_.size() > 2 && seconds_between(history_[1].first, now) > 2 * kRateWindowSeconds) history_.pop_front();
}

void JobMetrics::on_worker_started(const std::string& worker_id, MetricsClock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  integrate(now);
  workers_[worker_id].live = true;
}

void JobMetrics::on_worker_exit(const std::string& worker_id, MetricsClock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  integrate(now);
  auto it = workers_.find(worker_id);
  if (it != workers_.end()) it->second.live = false;  // its counters stay in the totals
}

bool JobMetrics::committed_progress(const std::string& worker_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = workers_.find(worker_id);
  return it != workers_.end() && it->second.reported && it->second.last.samples_committed > 0;
}

void JobMetrics::on_failure(const std::string& worker_id, bool recovers, MetricsClock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  integrate(now);
  ++totals_.failures;
  if (recovers && members_.count(worker_id) && !failed_at_) {
    failed_at_ = now;
    failed_gen_ = totals_.generation;
  }
}

void JobMetrics::on_restart(MetricsClock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  integrate(now);
  ++totals_.restarts;
}

void JobMetrics::on_straggler_report() {
  std::lock_guard<std::mutex> lock(mu_);
  ++totals_.straggler_reports;
}

void JobMetrics::on_advice(int recommended_world_size, double efficiency) {
  std::lock_guard<std::mutex> lock(mu_);
  totals_.recommended_world_size = recommended_world_size;
  totals_.scaling_efficiency = efficiency < 0 ? std::nullopt : std::optional<double>(efficiency);
}

void JobMetrics::on_generation(uint64_t gen, const std::vector<std::string>& members, MetricsClock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  integrate(now);
  std::set<std::string> next(members.begin(), members.end());
  if (have_generation_) {  // the first generation's members are the start, not joins
    for (const auto& m : next) totals_.joins += members_.count(m) ? 0 : 1;
    for (const auto& m : members_) totals_.leaves += next.count(m) ? 0 : 1;
  }
  have_generation_ = true;
  members_ = std::move(next);
  totals_.generation = gen;
  totals_.world_size = static_cast<int>(members.size());
  const int size = totals_.world_size;
  if (size > 0) {
    totals_.min_world_size = totals_.min_world_size == 0 ? size : std::min(totals_.min_world_size, size);
    totals_.max_world_size = std::max(totals_.max_world_size, size);
  }
}

void JobMetrics::fill_goodput(JobSnapshot* s) const {
  const double wall = s->uptime_seconds;
  s->steps_total = std::round(s->steps_total * 1e6) / 1e6;  // the 1/n shares of a step add up to whole steps
  s->goodput_samples_per_second = wall > 0 ? s->samples_committed / wall : 0;
  s->effective_training_ratio = wall > 0 ? s->phase_seconds[static_cast<int>(Phase::kTraining)] / wall : 0;
  // The same world sizes without failures: each size's training throughput over all the time the
  // job spent at that size. Known when sizes with a measured throughput cover >= 90% of that time.
  double ideal = 0, covered = 0, total = 0;
  for (const auto& kv : s->per_size) {
    total += kv.second.wall_seconds;
    if (kv.second.seconds <= 0 || kv.second.samples <= 0) continue;
    ideal += kv.second.samples / kv.second.seconds * kv.second.wall_seconds;
    covered += kv.second.wall_seconds;
  }
  if (total > 0 && covered >= 0.9 * total && ideal > 0) s->goodput_ratio = s->samples_committed / (ideal * total / covered);
}

JobSnapshot JobMetrics::snapshot(MetricsClock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  integrate(now);
  JobSnapshot s = totals_;
  s.uptime_seconds = seconds_between(start_, now);
  s.phase = job_phase();
  for (const auto& kv : workers_) {
    const Worker& w = kv.second;
    if (!w.reported) continue;
    s.samples_committed += static_cast<double>(w.last.samples_committed);
    s.allreduce_bytes += static_cast<double>(w.last.allreduce_bytes);
    s.allreduce_seconds += w.last.allreduce_seconds;
    s.store_ops += static_cast<double>(w.last.store_ops);
    s.store_op_seconds += w.last.store_op_seconds;
    if (!w.live) continue;
    ++s.workers_reporting;
    WorkerGauges g;
    g.worker_id = kv.first;
    g.phase = static_cast<Phase>(w.last.phase);
    g.generation = w.last.generation;
    g.rank = w.last.rank;
    g.step = w.last.step;
    g.step_seconds = w.step_seconds;
    g.compute_seconds = w.compute_seconds;
    g.steps = w.last.steps;
    g.samples = w.last.samples;
    s.workers.push_back(g);
  }
  for (const auto& kv : recoveries_) {
    s.recovery_seconds.push_back(kv.second.seconds);
    s.steps_replayed += static_cast<double>(kv.second.steps_replayed);
  }
  s.mean_world_size = sized_seconds_ > 0 ? size_seconds_ / sized_seconds_ : 0;
  if (s.max_world_size > 0)  // a weighted mean lies between the extremes (rounding aside)
    s.mean_world_size = std::clamp<double>(s.mean_world_size, s.min_world_size, s.max_world_size);
  // Rates over the last kRateWindowSeconds (the value at the window's start is the newest one
  // recorded at or before it).
  if (!history_.empty()) {
    const double window = std::min(kRateWindowSeconds, seconds_between(history_.front().first, now));
    if (window > 0) {
      const auto from = now - std::chrono::duration_cast<MetricsClock::duration>(std::chrono::duration<double>(window));
      auto base = history_.front().second;
      for (const auto& h : history_)
        if (h.first <= from) base = h.second;
      s.steps_per_second = (s.steps_total - base.first) / window;
      s.samples_per_second = (s.samples_total - base.second) / window;
    }
  }
  fill_goodput(&s);
  return s;
}

}  // namespace edl::launcher
