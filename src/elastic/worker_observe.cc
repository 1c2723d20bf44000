// Worker, batch-boundary observability (docs/observability.md): the straggler verdict of the
// gathered step times (report, eviction as a leave) and rank 0's throughput samples. The rest of
// the Worker: worker.cc.
#include <algorithm>

#include "common/logging.h"
#include "edl/elastic.h"
#include "edl/error.h"
#include "elastic/worker.h"

namespace edl::elastic {

// The straggler verdict of one boundary (identical on every member: the same gathered vector).
// Rank 0 reports new stragglers (log + <job>/straggler/<worker>); a worker to evict records why
// (<job>/g<G+1>/dropped/<me>, read by edl-run) and leaves at this boundary like a graceful leave, so
// every member changes membership at the next one.
void Worker::on_step_times(const std::vector<int64_t>& compute_us) {
  const StepObserver::Verdict v = observer_.observe(state_->step, compute_us, opt_.membership.min_np);
  const bool evicting = !v.evict.empty();
  if (view_.rank == 0) {
    for (const auto& r : v.reports) {
      const std::string who = r.rank < static_cast<int>(view_.members.size()) ? view_.members[r.rank].id : "?";
      const bool out = std::find(v.evict.begin(), v.evict.end(), r.rank) != v.evict.end();
      const std::string text = describe_straggler(r, view_.id, who, observer_.options(), out ? "evict" : "report");
      EDL_LOG(1) << "edl: straggler " << text;
      try {
        membership_.publish_later(membership_.keys().straggler(who), text);
      } catch (const Error& e) {
        EDL_LOG(1) << "edl: could not record the straggler report in the store: " << e.what();
      }
    }
  }
  // A member whose arrival at the next generation is prepared is judged again there.
  if (!evicting || leave_announced_ || membership_.prepared_for(view_.id + 1)) return;
  if (std::find(v.evict.begin(), v.evict.end(), view_.rank) == v.evict.end()) return;
  StragglerReport me;
  me.rank = view_.rank;
  me.step = state_->step;
  me.step_s = static_cast<double>(compute_us[view_.rank]) / 1e6;
  StragglerStats st = observer_.stats();
  me.median_s = st.median_s;
  me.consecutive = observer_.options().steps;
  const std::string why = "straggler: " + describe_straggler(me, view_.id, opt_.membership.worker_id,
                                                             observer_.options(), "evict");
  EDL_LOG(1) << "edl: worker " << opt_.membership.worker_id << " leaves as a " << why;
  try {
    store_->set(membership_.keys().dropped(view_.id + 1, opt_.membership.worker_id), why);
  } catch (const Error& e) {
    EDL_LOG(1) << "edl: could not record the eviction in the store: " << e.what();
  }
  membership_.announce_leave(view_.id);
  leave_announced_ = true;
  evicted_ = true;
}

bool Worker::step_times(uint64_t generation, uint64_t* seq, std::vector<int64_t>* compute_us,
                        std::vector<int64_t>* records) const {
  if (gathered_.seq == 0 || gathered_.generation != generation) return false;
  *seq = gathered_.seq;
  *compute_us = gathered_.compute_us;
  *records = gathered_.records;
  return true;
}

// Rank 0: the throughput of the current generation for edl-run's autoscaling advice.
void Worker::publish_throughput() {
  auto sample = observer_.throughput_sample(view_.id, view_.size, local_batch_.load());
  if (!sample) return;
  membership_.publish_later(membership_.keys().throughput(), *sample);  // never waits for the store
}

}  // namespace edl::elastic
