// The elastic retry loop (docs/elastic.md, "The run loop").
#include "elastic/worker.h"

#include "common/logging.h"
#include "edl/error.h"

namespace edl::elastic {

Group::~Group() = default;

namespace {
thread_local Group* t_group = nullptr;
}

Group* current_group() { return t_group; }
void set_current_group(Group* g) { t_group = g; }

Worker::Worker(std::shared_ptr<Store> store, WorkerOptions options, GroupFactory factory)
    : store_(store), opt_(std::move(options)), factory_(std::move(factory)), membership_(store, opt_.membership) {
  EDL_CHECK(factory_ != nullptr, InvalidArgument, "elastic: no group factory");
  EDL_CHECK(opt_.commit_every >= 1, InvalidArgument, "elastic: commit_every must be >= 1");
}

Worker::~Worker() {
  membership_.unwatch();
  membership_.stop();
  std::lock_guard<std::mutex> lock(mu_);
  if (group_ && t_group == group_.get()) t_group = nullptr;
}

std::shared_ptr<Group> Worker::group() const {
  std::lock_guard<std::mutex> lock(mu_);
  EDL_CHECK(group_ != nullptr, InvalidArgument, "elastic: this worker has not joined a generation yet");
  return group_;
}

void Worker::simulate_crash() {
  crashed_.store(true);
  membership_.freeze(/*process_dead=*/true);
  std::shared_ptr<Group> g;
  {
    std::lock_guard<std::mutex> lock(mu_);
    g = group_;
  }
  if (g) g->abort("simulated crash of worker " + opt_.membership.worker_id);
}

void Worker::on_failure(const std::string& reason) {
  failed_.store(true);
  std::shared_ptr<Group> g;
  {
    std::lock_guard<std::mutex> lock(mu_);
    g = group_;
  }
  if (g) g->abort(reason);
}

void Worker::count_reset(const std::string& why) {
  ++resets_;
  if (opt_.reset_limit > 0 && resets_ > opt_.reset_limit)
    throw JobError("elastic: reset limit of " + std::to_string(opt_.reset_limit) +
                   " reached (EDL_RESET_LIMIT / --reset-limit); last cause: " + why);
}

// Builds the Group of generation v and starts watching it. Throws CommError when a member is gone.
void Worker::install(const GenerationView& v) {
  view_ = v;
  leave_announced_ = false;
  flag_wait_ = nullptr;  // an agreement of the previous generation is void
  failed_.store(false);
  {
    std::lock_guard<std::mutex> lock(mu_);
    group_.reset();
  }
  if (crashed_) throw AbortedError("simulated crash");
  // Watch before connecting: a member that dies during the connect is reported (abort key).
  membership_.watch(v, [this](const std::string& reason) { on_failure(reason); });
  auto g = factory_(v, membership_.keys().comm_prefix(v.id));
  EDL_ASSERT(g && g->rank() == v.rank && g->size() == v.size);
  {
    std::lock_guard<std::mutex> lock(mu_);
    group_ = g;
  }
  if (failed_.load()) g->abort("generation " + std::to_string(v.id) + " failed while it was being built");
  if (in_run_) set_current_group(g.get());
  EDL_LOG(2) << "edl: worker " << opt_.membership.worker_id << " is rank " << v.rank << " of " << v.size
             << " in generation " << v.id;
}

void Worker::join() {
  if (joined_) return;
  membership_.start();
  GenerationView v = membership_.rendezvous(nullptr);
  for (;;) {
    try {
      install(v);
      joined_ = true;
      return;
    } catch (const CommError& e) {
      if (crashed_) throw;
      membership_.announce_abort(v.id, e.what());
      count_reset(e.what());
      membership_.unwatch();
      v = membership_.rendezvous(&v);
    }
  }
}

// sync + callbacks of the generation just installed.
void Worker::finish_generation(bool after_failure) {
  state_set_persist(*state_, view_.rank == 0);
  sync_state(*state_, *group());
  GenerationInfo info;
  info.generation = view_.id;
  info.rank = view_.rank;
  info.size = view_.size;
  info.previous_size = view_.previous_size;
  info.after_failure = after_failure;
  state_notify_generation(*state_, info);
}

// Re-rendezvous (survivors keep their order), build the new Group, sync. Retries on failures.
void Worker::form(bool after_failure) {
  for (;;) {
    bool failed = false;
    std::string why;
    try {
      membership_.unwatch();
      GenerationView prev = view_;
      GenerationView v = membership_.rendezvous(&prev);
      install(v);
      fault_point("sync");
      finish_generation(after_failure);
      return;
    } catch (const CommError& e) {
      if (crashed_) throw;
      failed = true;
      why = e.what();
    }
    if (failed) {
      membership_.announce_abort(view_.id, why);
      on_failure(why);
      count_reset(why);
      state_->restore();
      after_failure = true;
    }
  }
}

void Worker::fault_point(const std::string& point) {
  if (opt_.membership.fault) opt_.membership.fault(point);
}

void Worker::run(State& state, const std::function<void()>& fn) {
  EDL_CHECK(!in_run_.exchange(true), InvalidArgument, "edl::elastic::run is already running on this worker");
  struct Reset {
    Worker* w;
    ~Reset() {
      w->in_run_.store(false);
      w->state_ = nullptr;
      set_current_group(nullptr);
    }
  } reset{this};
  state_ = &state;
  if (!opt_.checkpoint_dir.empty() && state_checkpoint_dir(state).empty()) state.set_checkpoint_dir(opt_.checkpoint_dir);
  state_set_persist(state, false);  // rank 0 of each generation persists, once ranks are known
  if (state.committed_step() < 0 && !state.load_checkpoint()) state.commit();
  try {
    join();
    set_current_group(group().get());
    bool synced = false;
    while (!synced) {
      try {
        fault_point("sync");
        finish_generation(false);
        synced = true;
      } catch (const CommError& e) {
        if (crashed_) throw;
        membership_.announce_abort(view_.id, e.what());
        on_failure(e.what());
        count_reset(e.what());
        state.restore();
        form(true);
        synced = true;
      }
    }
    for (;;) {
      enum { kNone, kChanged, kFailed } what = kNone;
      std::string why;
      try {
        fn();
        membership_.announce_finished(view_.id);
        return;
      } catch (const MembershipChanged& e) {
        what = kChanged;
        why = e.what();
      } catch (const CommError& e) {
        what = kFailed;
        why = e.what();
      }
      if (crashed_) throw AbortedError("simulated crash of worker " + opt_.membership.worker_id);
      if (what == kChanged) {
        state.commit();
        since_commit_ = 0;
        if (leave_announced_) {
          EDL_LOG(1) << "edl: worker " << opt_.membership.worker_id << " left the job at step " << state.step;
          membership_.unwatch();
          membership_.stop();
          return;
        }
        count_reset(why);
        form(false);
      } else {
        EDL_LOG(1) << "edl: worker " << opt_.membership.worker_id << ": generation " << view_.id
                   << " failed: " << why;
        membership_.announce_abort(view_.id, why);
        on_failure(why);
        count_reset(why);
        state.restore();
        form(true);
      }
    }
  } catch (const JobFinished&) {
    if (view_.id != 0)  // it trained, was evicted (e.g. stopped too long) and missed the end: stale state
      throw JobError("edl: worker " + opt_.membership.worker_id + " was evicted after generation " +
                     std::to_string(view_.id) + " and the job finished before it could rejoin; its state is stale");
    EDL_LOG(1) << "edl: worker " << opt_.membership.worker_id << ": the job finished before it was admitted";
  }
}

void Worker::notify_batch_end() {
  EDL_CHECK(in_run_ && state_ != nullptr, InvalidArgument,
            "edl::notify_batch_end() must be called inside edl::elastic::run");
  if (crashed_) throw AbortedError("simulated crash of worker " + opt_.membership.worker_id);
  state_->step += 1;
  fault_point("batch_end");
  // The batch-boundary agreement: one 8-byte max-allreduce of the pending bits, started at this
  // boundary and evaluated at the next one, so it runs in the background during the next batch.
  // Every member evaluates the same request at the same boundary, so all of them change membership
  // at the same batch (or none does).
  if (leave_requested_.load() && !leave_announced_) {
    membership_.announce_leave(view_.id);
    leave_announced_ = true;
  }
  if (flag_wait_) {
    auto wait = std::move(flag_wait_);
    flag_wait_ = nullptr;
    wait();
    if (flag_ != 0)
      throw MembershipChanged(std::string("membership change at step ") + std::to_string(state_->step) + ": " +
                              ((flag_ & 2) ? "a worker leaves" : "a worker joins"));
  }
  flag_ = (leave_announced_ ? 2 : 0) | (membership_.change_pending() ? 1 : 0);
  flag_wait_ = group()->allreduce_max_async(&flag_);
  if (++since_commit_ >= opt_.commit_every) {
    state_->commit();
    since_commit_ = 0;
  }
}

}  // namespace edl::elastic
