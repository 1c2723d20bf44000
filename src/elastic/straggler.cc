// The straggler rule (straggler.h, docs/observability.md "Stragglers").
#include "elastic/straggler.h"

#include <algorithm>
#include <cstdio>

#include "edl/error.h"

namespace edl::elastic {

StragglerDetector::StragglerDetector(StragglerOptions o) : o_(o) {
  EDL_CHECK(o_.factor > 1.0, InvalidArgument, "straggler factor must be > 1, got " + std::to_string(o_.factor));
  EDL_CHECK(o_.steps >= 1, InvalidArgument, "straggler steps must be >= 1, got " + std::to_string(o_.steps));
}

void StragglerDetector::reset(int size) {
  run_.assign(static_cast<size_t>(std::max(size, 0)), 0);
  last_.assign(run_.size(), 0.0);
}

double StragglerDetector::median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}

std::vector<StragglerReport> StragglerDetector::observe(int64_t step, const std::vector<double>& step_s) {
  if (run_.size() != step_s.size()) reset(static_cast<int>(step_s.size()));
  std::vector<double> known;
  for (double t : step_s)
    if (t > 0) known.push_back(t);
  const double med = median(known);
  std::vector<StragglerReport> out;
  for (size_t r = 0; r < step_s.size(); ++r) {
    const double t = step_s[r];
    last_[r] = t;
    const bool slow = t > 0 && known.size() >= 2 && t > o_.factor * med && t - med > o_.min_gap_s;
    run_[r] = slow ? run_[r] + 1 : 0;
    if (run_[r] == o_.steps) out.push_back({static_cast<int>(r), step, t, med, run_[r]});
  }
  return out;
}

std::vector<int> StragglerDetector::persistent() const {
  std::vector<int> p;
  for (size_t r = 0; r < run_.size(); ++r)
    if (run_[r] >= o_.steps) p.push_back(static_cast<int>(r));
  std::stable_sort(p.begin(), p.end(), [&](int a, int b) { return last_[a] > last_[b]; });
  return p;
}

std::vector<int> StragglerDetector::to_evict(int min_np) const {
  if (!o_.evict) return {};
  std::vector<int> p = persistent();
  const int room = static_cast<int>(run_.size()) - std::max(min_np, 1);
  if (room <= 0) return {};
  if (static_cast<int>(p.size()) > room) p.resize(static_cast<size_t>(room));
  return p;
}

std::string describe_straggler(const StragglerReport& r, uint64_t gen, const std::string& worker,
                               const StragglerOptions& o, const char* action) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), "gen=%llu step=%lld rank=%d worker=%s step_ms=%.2f median_ms=%.2f factor=%g steps=%d action=%s",
                static_cast<unsigned long long>(gen), static_cast<long long>(r.step), r.rank, worker.c_str(),
                r.step_s * 1000, r.median_s * 1000, o.factor, o.steps, action);
  return buf;
}

}  // namespace edl::elastic
