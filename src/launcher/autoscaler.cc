// Autoscaler (autoscaler.h): the s_{k,d} table and the heuristic scaling schedule.
#include "launcher/autoscaler.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace edl::launcher {
namespace {

std::string fmt(double v) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.3f", v);
  return b;
}

}  // namespace

std::optional<ThroughputSample> parse_throughput(const std::string& text) {
  std::istringstream in(text);
  ThroughputSample s;
  unsigned long long gen = 0;
  long long steps = 0, batch = 0;
  if (!(in >> gen >> s.size >> steps >> s.seconds >> batch)) return std::nullopt;
  std::string extra;
  if (in >> extra) return std::nullopt;
  if (s.size < 1 || steps < 0 || !(s.seconds >= 0) || batch < 0) return std::nullopt;
  s.gen = gen;
  s.steps = steps;
  s.local_batch = batch;
  return s;
}

Autoscaler::Autoscaler(AutoscaleOptions o) : o_(o) {
  if (!(o_.threshold >= 0 && o_.threshold <= 1)) throw std::invalid_argument("scaling threshold must be in [0, 1]");
  if (o_.step < 1) throw std::invalid_argument("scaling step must be >= 1");
  if (o_.interval < 1) throw std::invalid_argument("scaling interval must be >= 1");
  if (o_.max_global_batch < 0) throw std::invalid_argument("max global batch must not be negative");
}

double Autoscaler::efficiency(double r_k, double r_kd, int k, int d) {
  if (!(r_k > 0) || k < 1 || d < 1) return -1;
  return ((r_kd - r_k) / d) / (r_k / k);
}

int Autoscaler::max_world_size(int64_t local_batch) const {
  int64_t m = o_.max_np > 0 ? o_.max_np : (int64_t{1} << 30);
  if (o_.max_global_batch > 0 && local_batch > 0) m = std::min<int64_t>(m, o_.max_global_batch / local_batch);
  return static_cast<int>(std::max<int64_t>(m, std::max(o_.min_np, 1)));
}

std::map<int, double> Autoscaler::rates_locked() const {
  std::map<int, std::pair<double, double>> acc;  // k -> (samples, seconds)
  for (const auto& [gen, s] : by_gen_) {
    if (s.steps <= 0 || !(s.seconds > 0)) continue;
    const double per_batch = static_cast<double>(s.size) * static_cast<double>(s.local_batch > 0 ? s.local_batch : 1);
    acc[s.size].first += static_cast<double>(s.steps) * per_batch;
    acc[s.size].second += s.seconds;
  }
  std::map<int, double> r;
  for (const auto& [k, v] : acc) r[k] = v.first / v.second;
  return r;
}

Recommendation Autoscaler::decide(const ThroughputSample& s) const {
  const auto r = rates_locked();
  const int k = s.size, d = o_.step, lo = std::max(o_.min_np, 1), hi = max_world_size(s.local_batch);
  Recommendation rec;
  rec.current = k;
  rec.gen = s.gen;
  rec.world_size = k;
  auto known = [&](int n) { return r.count(n) > 0; };
  if (!known(k)) {
    rec.reason = "no throughput measured at " + std::to_string(k) + " workers yet";
    return rec;
  }
  const std::string S = fmt(o_.threshold);
  if (k - d >= lo && known(k - d)) {
    const double e = efficiency(r.at(k - d), r.at(k), k - d, d);
    rec.efficiency = e;  // kept when nothing else decides
    if (e <= o_.threshold) {
      rec.world_size = k - d;
      rec.efficiency = e;
      rec.reason = "s_{" + std::to_string(k - d) + "," + std::to_string(d) + "}=" + fmt(e) + " <= S=" + S + ": scale in";
      return rec;
    }
  }
  if (k + d <= hi) {
    if (known(k + d)) {
      const double e = efficiency(r.at(k), r.at(k + d), k, d);
      rec.efficiency = e;
      if (e > o_.threshold) {
        rec.world_size = k + d;
        rec.reason = "s_{" + std::to_string(k) + "," + std::to_string(d) + "}=" + fmt(e) + " > S=" + S + ": scale out";
      } else {
        rec.reason = "s_{" + std::to_string(k) + "," + std::to_string(d) + "}=" + fmt(e) + " <= S=" + S + ": stay";
      }
      return rec;
    }
    if (o_.probe) {
      rec.world_size = k + d;
      rec.reason = "R_" + std::to_string(k + d) + " unknown: probe";
      return rec;
    }
    rec.reason = "R_" + std::to_string(k + d) + " unknown (probes need --autoscale): stay";
    return rec;
  }
  rec.reason = std::to_string(k + d) + " workers exceed the limit of " + std::to_string(hi) +
               (hi < (o_.max_np > 0 ? o_.max_np : (1 << 30)) ? " (--max-global-batch)" : " (--max-np)") + ": stay";
  return rec;
}

bool Autoscaler::observe(const ThroughputSample& s) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_gen_.find(s.gen);
  if (it != by_gen_.end() && it->second.steps > s.steps) return false;  // an older sample of the generation
  by_gen_[s.gen] = s;
  auto [next, fresh] = next_decision_.emplace(s.gen, o_.interval);
  (void)fresh;
  if (s.steps < next->second) return false;
  while (next->second <= s.steps) next->second += o_.interval;
  Recommendation rec = decide(s);
  rec.decision = rec_.decision + 1;
  const bool changed = rec.world_size != rec_.world_size;
  rec_ = rec;
  return changed;
}

int Autoscaler::recommended_world_size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rec_.world_size;
}

Recommendation Autoscaler::last() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rec_;
}

std::map<int, double> Autoscaler::rates() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rates_locked();
}

std::string Autoscaler::rates_text() const {
  std::string t;
  for (const auto& [k, v] : rates()) t += (t.empty() ? "" : ",") + std::to_string(k) + ":" + fmt(v);
  return t.empty() ? "none" : t;
}

}  // namespace edl::launcher
