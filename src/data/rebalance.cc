// Rebalancer (rebalance.h): per-record compute times -> the min-max split of the global batch.
#include "data/rebalance.h"

#include <algorithm>
#include <queue>

namespace edl::data::detail {

void Rebalancer::reset(int size, uint64_t global) {
  const uint64_t n = static_cast<uint64_t>(std::max(1, size));
  global_ = global;
  split_.assign(n, global / n);
  for (uint64_t r = 0; r < global % n; ++r) ++split_[r];
  samples_.assign(n, {});
  fresh_.assign(n, 0);
}

void Rebalancer::observe(const std::vector<double>& compute_s, const std::vector<uint64_t>& records) {
  if (compute_s.size() != split_.size() || records.size() != split_.size()) return;
  for (size_t r = 0; r < split_.size(); ++r) {
    if (records[r] == 0 || !(compute_s[r] > 0)) continue;
    auto& w = samples_[r];
    if (w.size() == kWindow) w.erase(w.begin());
    w.push_back(compute_s[r] / static_cast<double>(records[r]));
    ++fresh_[r];
  }
}

std::vector<double> Rebalancer::per_record_s() const {
  std::vector<double> t(samples_.size(), 0.0);
  for (size_t r = 0; r < samples_.size(); ++r) {
    if (samples_[r].empty()) continue;
    std::vector<double> w = samples_[r];
    std::nth_element(w.begin(), w.begin() + w.size() / 2, w.end());
    t[r] = w[w.size() / 2];
  }
  return t;
}

bool Rebalancer::update() {
  if (split_.size() < 2 || global_ < split_.size()) return false;
  for (size_t f : fresh_)
    if (f < kMinSamples) return false;
  const std::vector<double> t = per_record_s();
  std::vector<uint64_t> next = min_max_split(global_, t);
  double now = 0, then = 0;
  for (size_t r = 0; r < t.size(); ++r) {
    now = std::max(now, static_cast<double>(split_[r]) * t[r]);
    then = std::max(then, static_cast<double>(next[r]) * t[r]);
  }
  if (next == split_ || !(then < (1.0 - kHysteresis) * now)) return false;
  split_ = std::move(next);
  std::fill(fresh_.begin(), fresh_.end(), 0);
  return true;
}

std::vector<uint64_t> Rebalancer::min_max_split(uint64_t global, const std::vector<double>& t) {
  const size_t n = t.size();
  std::vector<uint64_t> b(n, 0);
  if (n == 0) return b;
  // Each rank gets one record first; then every record goes to the rank that would finish first.
  using Entry = std::pair<double, size_t>;  // (finish time with one more record, rank)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> q;
  uint64_t left = global;
  for (size_t r = 0; r < n && left > 0; ++r, --left) {
    b[r] = 1;
    q.emplace(2.0 * t[r], r);
  }
  for (; left > 0; --left) {
    const size_t r = q.top().second;
    q.pop();
    ++b[r];
    q.emplace(static_cast<double>(b[r] + 1) * t[r], r);
  }
  return b;
}

}  // namespace edl::data::detail
