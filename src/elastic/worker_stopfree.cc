// Stop-free joins on the worker (docs/elastic.md, "Stop-free joins"): the state server every member
// runs, the sync that ships a skeleton to newcomers, and the newcomer's catch-up at batch boundaries.
#include <algorithm>

#include "common/logging.h"
#include "common/timeline.h"
#include "edl/elastic.h"
#include "elastic/state_join.h"
#include "elastic/worker.h"

namespace edl::elastic {
namespace {
thread_local const Worker* t_worker = nullptr;  // the Worker whose run() this thread is in

// The median of the other members' compute times at the last boundary (0 = unknown).
int64_t others_compute_us(const std::vector<int64_t>& by_rank, int me) {
  std::vector<int64_t> v;
  for (size_t r = 0; r < by_rank.size(); ++r)
    if (static_cast<int>(r) != me && by_rank[r] > 0) v.push_back(by_rank[r]);
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}
}  // namespace

void set_current_worker(const Worker* w) { t_worker = w; }

bool catching_up() { return t_worker != nullptr && t_worker->catching_up(); }

void Worker::start_state_server() {
  if (!opt_.stop_free.enabled) return;
  StateServerOptions so;
  so.bind_address = opt_.membership.bind_address;
  so.job = opt_.membership.job_id;
  so.secret = opt_.stop_free.secret;
  so.io_timeout = opt_.stop_free.io_timeout;
  server_ = std::make_unique<StateServer>(so);
}

// The state sync of finish_generation; true when no member had synced before (check the lineage).
bool Worker::sync_generation_state() {
  // The membership changed before this newcomer caught up: back to its own state, as a newcomer again.
  abandon_catch_up(/*restore=*/true);
  if (!server_) {
    std::vector<std::string> notes;
    for (const auto& m : view_.members) notes.push_back(m.note);
    return sync_state(*state_, *group(), notes);
  }
  JoinPlan plan = sync_state_stopfree(*state_, *group(), server_->address());
  server_->publish(state_->committed_step(), state_commit(*state_));
  if (!plan.catch_up) return plan.fresh_start;
  fetch_cancel_.store(false);
  StateFetchOptions fo;
  fo.job = opt_.membership.job_id;
  fo.secret = opt_.stop_free.secret;
  fo.generation = view_.id;
  fo.rank = view_.rank;
  fo.size = view_.size;
  fo.io_timeout = opt_.stop_free.io_timeout;
  auto fetch = std::make_unique<StateFetch>(fo, plan.sources, state_tensor_space(*state_), &fetch_cancel_);
  catch_up_ = std::make_unique<CatchUp>(std::move(fetch), opt_.stop_free.fetch_share, opt_.stop_free.max_chunk_bytes);
  catch_identity_ = plan.identity;
  catch_since_ = std::chrono::steady_clock::now();
  EDL_LOG(2) << "edl: worker " << opt_.membership.worker_id << " catches up from step " << plan.step << " ("
             << catch_up_->total() << " bytes of tensors from " << plan.sources.size() << " members)";
  if (catch_up_->total() == 0) caught_up();
  return plan.fresh_start;
}

void Worker::catch_up_at_boundary(int64_t compute_us) {
  timeline::Span span(timeline::Lane::kElastic, "catch-up");
  span.arg("generation", static_cast<int64_t>(view_.id)).arg("step", state_->step);
  const auto t0 = std::chrono::steady_clock::now();
  const bool done = catch_up_->at_boundary(state_->step, others_compute_us(gathered_.compute_us, view_.rank), compute_us);
  // Waiting for the survivors' bytes is not this worker's compute (straggler detection).
  observer_.add_waited(std::chrono::steady_clock::now() - t0);
  if (done) caught_up();
}

// Every byte arrived: the State holds the job's state of this step; commit it and train from now on.
void Worker::caught_up() {
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - catch_since_).count();
  EDL_LOG(2) << "edl: worker " << opt_.membership.worker_id << " caught up at step " << state_->step << " in "
             << catch_up_->chunks() << " chunks, " << secs << " s";
  catch_up_.reset();  // closes the connections: the survivors commit on their own schedule again
  state_caught_up(*state_, catch_identity_);
  commit();
  since_commit_ = 0;
}

// The training function returned while this worker was still catching up: fetch the rest of the
// last commit at once (the survivors' state servers wait for it before their processes end).
void Worker::finish_catch_up() {
  if (!catch_up_) return;
  bool done = false;
  std::string why = "the survivors did not commit the last step";
  try {
    done = catch_up_->finish(state_->step);
  } catch (const Error& e) {
    why = e.what();
  }
  if (done) {
    caught_up();
    return;
  }
  abandon_catch_up(/*restore=*/true);
  throw JobError("edl: worker " + opt_.membership.worker_id +
                 " joined without stopping the job, which finished before it received the whole state: " + why);
}

void Worker::abandon_catch_up(bool restore) {
  if (!catch_up_) return;
  EDL_LOG(2) << "edl: worker " << opt_.membership.worker_id << " abandons its catch-up at step " << state_->step;
  catch_up_.reset();
  if (restore) state_->restore();  // its own last commit: the state it had before the join
}

}  // namespace edl::elastic
