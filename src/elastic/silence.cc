// Silence of a member judged from the beats this observer reads (docs/elastic.md, "Failure detection").
#include "elastic/silence.h"

namespace edl::elastic {

using std::chrono::milliseconds;

std::vector<std::pair<std::string, milliseconds>> SilenceTracker::observe(const std::map<std::string, std::string>& values,
                                                                          Clock::time_point end) {
  // The first round, and every round after an interruption of our own view, starts the recovery count.
  if (!last_round_ || end - *last_round_ > opt_.max_gap) recovered_ = end;
  last_round_ = end;
  for (auto it = seen_.begin(); it != seen_.end();) {  // members no longer read (left, lease gone)
    if (!values.count(it->first)) it = seen_.erase(it);
    else ++it;
  }
  std::vector<std::pair<std::string, milliseconds>> silent;
  for (const auto& [id, value] : values) {
    auto it = seen_.find(id);
    if (it == seen_.end() || it->second.value != value) {
      seen_[id] = Seen{value, end};
      continue;
    }
    auto quiet = std::chrono::duration_cast<milliseconds>(end - it->second.since);
    if (quiet >= opt_.lease && end - recovered_ >= opt_.recovery) silent.emplace_back(id, quiet);
  }
  return silent;
}

std::optional<SilenceTracker::Clock::time_point> SilenceTracker::first_seen(const std::string& id,
                                                                           const std::string& value) const {
  auto it = seen_.find(id);
  if (it == seen_.end() || it->second.value != value) return std::nullopt;
  return it->second.since;
}

void SilenceTracker::reset() {
  seen_.clear();
  last_round_.reset();
}

}  // namespace edl::elastic
