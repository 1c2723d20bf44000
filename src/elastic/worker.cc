// The elastic retry loop (docs/elastic.md, "The run loop").
#include "elastic/worker.h"

#include <random>

#include "common/logging.h"
#include "common/timeline.h"
#include "edl/elastic.h"
#include "edl/error.h"
#include "elastic/worker_metrics.h"
#include "elastic/generation_change.h"
#include "elastic/state_join.h"

namespace edl::elastic {

Group::~Group() = default;

namespace {
thread_local Group* t_group = nullptr;

// "MismatchError: <what>" etc.: the class of a final error, for <job>/failed and the logs.
std::string describe(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const MismatchError& x) {
    return std::string("MismatchError: ") + x.what();
  } catch (const DataError& x) {
    return std::string("DataError: ") + x.what();
  } catch (const InvalidArgument& x) {
    return std::string("InvalidArgument: ") + x.what();
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an exception of unknown type";
  }
}

std::string new_lineage_id() {
  std::random_device rd;
  std::mt19937_64 g((static_cast<uint64_t>(rd()) << 32) ^ rd());
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(g()));
  return buf;
}

int64_t parse_step(const std::string& record, std::string* lineage) {
  auto sp = record.find(' ');
  if (lineage) *lineage = record.substr(0, sp);
  if (sp == std::string::npos) return -1;
  try {
    return std::stoll(record.substr(sp + 1));
  } catch (const std::exception&) {
    return -1;
  }
}
}  // namespace

using metrics::Phase;
metrics::WorkerMetrics& stats() { return metrics::WorkerMetrics::instance(); }

Group* current_group() { return t_group; }
void set_current_group(Group* g) { t_group = g; }

Worker::Worker(std::shared_ptr<Store> store, WorkerOptions options, GroupFactory factory)
    : store_(store),
      opt_(std::move(options)),
      factory_(std::move(factory)),
      membership_(store, opt_.membership),
      observer_(opt_.stragglers) {
  EDL_CHECK(factory_ != nullptr, InvalidArgument, "elastic: no group factory");
  EDL_CHECK(opt_.commit_every >= 1, InvalidArgument, "elastic: commit_every must be >= 1");
  start_state_server();
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
  fetch_cancel_.store(true);
  membership_.freeze(/*process_dead=*/true);
  std::shared_ptr<Group> g;
  {
    std::lock_guard<std::mutex> lock(mu_);
    g = group_;
  }
  if (g) g->abort("simulated crash of worker " + opt_.membership.worker_id);
}

void Worker::on_failure(const std::string& reason) {
  if (!failed_.load()) timeline::instant(timeline::Lane::kElastic, "failure seen");
  failed_.store(true);
  fetch_cancel_.store(true);  // a newcomer's state fetch in progress ends
  std::shared_ptr<Group> g;
  {
    std::lock_guard<std::mutex> lock(mu_);
    g = group_;
    if (building_cancel_) building_cancel_->store(true);  // a communicator still connecting gives up
  }
  if (g) g->abort(reason);
}

void Worker::count_reset(const std::string& why) {
  ++resets_;
  if (opt_.reset_limit >= 0 && resets_ > opt_.reset_limit)
    throw JobError("elastic: reset limit of " + std::to_string(opt_.reset_limit) +
                   " reached (EDL_RESET_LIMIT / --reset-limit); last cause: " + why);
}

// Builds the Group of generation v and starts watching it. Throws CommError when a member is gone.
void Worker::install(const GenerationView& v) {
  if (view_.id != v.id) previous_generation_ = view_.id;
  view_ = v;
  stats().set_generation(v.id, v.rank, v.size);
  leave_announced_ = false;
  evicted_ = false;  // an eviction announced in an earlier generation that then failed is void
  flag_wait_ = nullptr;  // an agreement of the previous generation is void
  observer_.new_generation(v.size);
  failed_.store(false);
  {
    std::lock_guard<std::mutex> lock(mu_);
    group_.reset();
  }
  if (crashed_) throw AbortedError("simulated crash");
  if (server_) server_->set_generation(v.id, v.rank, v.size);
  // Watch before connecting: a member that dies during the connect is reported (abort key).
  GenerationView building = v;
  building.cancel = std::make_shared<std::atomic<bool>>(false);
  {
    std::lock_guard<std::mutex> lock(mu_);
    building_cancel_ = building.cancel;
  }
  membership_.watch(v, [this](const std::string& reason) { on_failure(reason); });
  timeline::Span connect(timeline::Lane::kElastic, "connect");
  connect.arg("generation", static_cast<int64_t>(v.id)).arg("rank", v.rank).arg("size", v.size);
  std::shared_ptr<Group> g;
  try {
    g = factory_(building, membership_.keys().comm_prefix(v.id));
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    building_cancel_.reset();
    throw;
  }
  EDL_ASSERT(g && g->rank() == v.rank && g->size() == v.size);
  {
    std::lock_guard<std::mutex> lock(mu_);
    group_ = g;
    building_cancel_.reset();
  }
  membership_.built();
  if (failed_.load()) g->abort("generation " + std::to_string(v.id) + " failed while it was being built");
  if (in_run_) set_current_group(g.get());
  EDL_LOG(2) << "edl: worker " << opt_.membership.worker_id << " is rank " << v.rank << " of " << v.size
             << " in generation " << v.id;
}

void Worker::join() {
  if (joined_) return;
  stats().set_phase(Phase::kRendezvous);
  membership_.start();
  GenerationView v = rendezvous(nullptr);
  for (;;) {
    try {
      install(v);
      joined_ = true;
      return;
    } catch (const CommError& e) {
      if (crashed_) throw;
      EDL_LOG(2) << "edl: worker " << opt_.membership.worker_id << ": building generation " << v.id
                 << " failed here: " << e.what();
      membership_.announce_abort(v.id, e.what());
      count_reset(e.what());
      membership_.unwatch();
      v = rendezvous(&v);
    }
  }
}

// sync + callbacks of the generation just installed.
void Worker::finish_generation(bool after_failure) {
  if (stats().phase() != Phase::kRecovery) stats().set_phase(Phase::kSync);  // a recovery's sync stays in it
  timeline::Span sync(timeline::Lane::kElastic, "state sync");
  sync.arg("generation", static_cast<int64_t>(view_.id)).arg("rank", view_.rank).arg("size", view_.size);
  state_set_persist(*state_, view_.rank == 0);
  if (sync_generation_state()) check_lineage();
  GenerationInfo info;
  info.generation = view_.id;
  info.rank = view_.rank;
  info.size = view_.size;
  info.previous_size = view_.previous_size;  // the decider's: the same on every member
  info.after_failure = after_failure;
  info.role = role_of(previous_generation_, view_.id);
  info.previous_generation = previous_generation_;
  info.reason = view_.reason;  // the decider's: the same on every member
  state_notify_generation(*state_, info);
}

// Re-rendezvous (survivors keep their order), build the new Group, sync. Retries on failures.
void Worker::form(bool after_failure) {
  // Timeline: the whole re-formation, "recovery" after a failure, "resize" after a join or leave.
  const int64_t t0 = timeline::now_us();
  const uint64_t from = view_.id;
  const bool recovery = after_failure;
  auto trace = [&] {
    if (!timeline::on()) return;
    timeline::Event e(timeline::Lane::kElastic, recovery ? "recovery" : "resize");
    e.span(t0, timeline::now_us()).arg("generation", static_cast<int64_t>(view_.id));
    e.arg("previous_generation", static_cast<int64_t>(from)).arg("rank", view_.rank).arg("size", view_.size);
    timeline::record(e);
  };
  for (;;) {
    bool failed = false;
    std::string why;
    try {
      membership_.unwatch();
      GenerationView prev = view_;
      GenerationView v = rendezvous(&prev);
      install(v);
      fault_point("sync");
      finish_generation(after_failure);
      trace();
      return;
    } catch (const CommError& e) {
      if (crashed_) throw;
      failed = true;
      why = e.what();
    }
    if (failed) {
      on_comm_failure(why);
      after_failure = true;
    }
  }
}

void Worker::fault_point(const std::string& point) {
  if (opt_.membership.fault) opt_.membership.fault(point);
}

// After a sync in which no member carried state from a previous generation (docs/elastic.md,
// "Lineage"): the first generation of a job, or every member of the last one was lost. Every member
// runs this with the same state (sync) and the same store, so all reach the same verdict.
void Worker::check_lineage() {
  const Keys& k = membership_.keys();
  const std::string& job = opt_.membership.job_id;
  // The verdict is agreed through g<G>/lineage (first writer wins): a lineage id, or "!" + a reason.
  auto verdict = [&]() -> std::string {
    std::string mine = state_lineage(*state_);
    auto stored = store_->get(k.lineage());
    if (!stored) return mine.empty() ? new_lineage_id() : mine;  // a fresh job, or a whole-job restart
    auto record = store_->get(k.checkpoint());
    std::string rec_lineage;
    int64_t rec_step = record ? parse_step(*record, &rec_lineage) : -1;
    std::string why;
    if (mine == *stored) {
      if (rec_lineage != *stored || state_->committed_step() >= rec_step) return mine;  // resumes its history
      why = "the state loaded is at step " + std::to_string(state_->committed_step()) +
            " but the job's newest checkpoint is at step " + std::to_string(rec_step);
    } else if (rec_lineage == *stored) {
      why = "no member loaded the job's newest checkpoint (lineage " + *stored + ", step " +
            std::to_string(rec_step) + "; is EDL_CHECKPOINT_DIR='" + state_checkpoint_dir(*state_) +
            "' the directory it was written to?)";
    } else {
      why = "no checkpoint";
    }
    if (opt_.allow_restart_from_scratch) {
      EDL_LOG(1) << "edl: job '" << job << "': all members lost, " << why
                 << "; restarting from scratch (EDL_ALLOW_RESTART_FROM_SCRATCH)";
      return new_lineage_id();
    }
    return "!edl: job '" + job + "': all members lost, " + why +
           "; refusing to restart from scratch (allow it with edl-run --allow-restart-from-scratch / "
           "EDL_ALLOW_RESTART_FROM_SCRATCH=1)";
  };
  std::optional<std::string> cur = store_->get(k.lineage_of(view_.id));
  std::string agreed = cur ? *cur : verdict();
  if (!cur && !store_->compare_set(k.lineage_of(view_.id), std::nullopt, agreed, &cur) && cur) agreed = *cur;
  if (!agreed.empty() && agreed[0] == '!') {
    // Final for the whole job: record it at <job>/failed so that edl-run fails the job (exit 3)
    // instead of starting newcomers that would reach the same verdict again (a restart loop).
    try {
      membership_.mark_failed(agreed.substr(1));
    } catch (const StoreError&) {
    }
    throw JobError(agreed.substr(1));
  }
  if (agreed != state_lineage(*state_)) {
    EDL_LOG(2) << "edl: generation " << view_.id << " starts lineage " << agreed;
  }
  store_->set(k.lineage(), agreed);
  state_set_identity(*state_, job, agreed);
}

// A failure of generation G seen by this worker (any CommError): announce it, abort the Group, and
// fail fast if the job failed for good meanwhile (another member's final error).
void Worker::on_comm_failure(const std::string& why) {
  membership_.discard_prepared();  // the rendezvous after a failure arrives afresh
  EDL_LOG(2) << "edl: worker " << opt_.membership.worker_id << ": generation " << view_.id << " failed here: " << why;
  membership_.announce_abort(view_.id, why);
  on_failure(why);
  membership_.check_failed();
  count_reset(why);
  if (recovery_since_ == std::chrono::steady_clock::time_point{}) recovery_since_ = std::chrono::steady_clock::now();
  stats().set_phase(Phase::kRecovery);
  const int64_t before = state_->step;
  state_->restore();
  stats().rolled_back(before - state_->step, state_->step);
  replayed_ += std::max<int64_t>(before - state_->step, 0);
}

// Training (re)starts in the current generation: ends a recovery in progress (worker metrics).
void Worker::training_resumes() {
  if (recovery_since_ != std::chrono::steady_clock::time_point{}) {
    stats().recovered(view_.id,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - recovery_since_).count(),
                      replayed_);
    recovery_since_ = {};
    replayed_ = 0;
  }
  stats().set_phase(Phase::kTraining);
}

// An error a restart cannot cure: mark the job failed (other members and edl-run see <job>/failed),
// abort the generation so the others stop at once, throw JobFailed.
void Worker::fail_job(std::exception_ptr cause) {
  std::string reason = "worker " + opt_.membership.worker_id + " at step " + std::to_string(state_->step) +
                       " of generation " + std::to_string(view_.id) + ": " + describe(cause);
  EDL_LOG(1) << "edl: job failed: " << reason;
  try {
    membership_.mark_failed(reason);
    membership_.announce_abort(view_.id, "job failed: " + reason);
  } catch (const Error& e) {
    EDL_LOG(1) << "edl: could not record the job failure in the store: " << e.what();
  }
  membership_.unwatch();
  on_failure("job failed: " + reason);
  std::optional<std::string> recorded;  // another member's failure may have been first
  try {
    recorded = membership_.failed_reason();
  } catch (const Error&) {
  }
  throw JobFailed(recorded ? *recorded : reason, cause);
}

RunOutcome Worker::run(State& state, const std::function<void()>& fn) {
  EDL_CHECK(!in_run_.exchange(true), InvalidArgument, "edl::elastic::run is already running on this worker");
  struct Reset {
    Worker* w;
    ~Reset() {
      if (w->state_) {  // the writer must not call into this Worker after run() returned
        w->state_->flush_checkpoint();
        state_on_checkpoint_written(*w->state_, nullptr);
      }
      w->in_run_.store(false);
      w->state_ = nullptr;
      set_current_group(nullptr);
      set_current_worker(nullptr);
    }
  } reset{this};
  state_ = &state;
  set_current_worker(this);
  if (leave_requested_.load()) membership_.request_leave();  // asked before run() began
  if (!opt_.checkpoint_dir.empty() && state_checkpoint_dir(state).empty()) state.set_checkpoint_dir(opt_.checkpoint_dir);
  state_set_persist(state, false);  // rank 0 of each generation persists, once ranks are known
  try {
    adopt_state(state);  // first: a newcomer's own first commit never holds up the members it joins
    join();
    set_current_group(group().get());
    sync_first_generation();
    for (;;) {
      enum { kNone, kChanged, kFailed, kUser } what = kNone;
      std::string why;
      std::exception_ptr cause;
      try {
        membership_.progress();
        training_resumes();
        fn();
        finish_catch_up();  // a stop-free newcomer still catching up fetches the rest of the last commit
        stats().set_phase(Phase::kDone);
        membership_.announce_finished(view_.id);
        membership_.unwatch();  // no progress deadline or peer checks once training is over
        if (server_) server_->drain(opt_.stop_free.io_timeout);  // let such a newcomer finish first
        return RunOutcome::kFinished;
      } catch (const MembershipChanged& e) {
        what = kChanged;
        why = e.what();
      } catch (const CommError& e) {
        what = kFailed;
        why = e.what();
      } catch (const JobError&) {  // reset limit, below the minimum, JobFailed: final as they are
        throw;
      } catch (const StoreError&) {  // the control plane is gone: nothing to retry against
        throw;
      } catch (...) {  // MismatchError, DataError, any exception of the user's function
        what = kUser;
        cause = std::current_exception();
        why = describe(cause);
      }
      if (crashed_) throw AbortedError("simulated crash of worker " + opt_.membership.worker_id);
      membership_.check_store();  // a generation aborted because the store is gone: final
      if (what == kUser && failed_.load()) {
        // The generation failed under us (e.g. a peer died mid-step) and the user's code turned the
        // resulting error into its own: a peer failure, not a user error.
        what = kFailed;
      }
      if (what == kUser && !opt_.retry_user_errors) fail_job(cause);
      if (what == kChanged) {
        if (commit_and_leave_if_announced(state)) return RunOutcome::kLeft;
        count_reset(why);
        form(false);
      } else {
        EDL_LOG(1) << "edl: worker " << opt_.membership.worker_id << ": generation " << view_.id
                   << " failed: " << why;
        on_comm_failure(why);
        form(true);
      }
    }
  } catch (const JobError&) {
    // Final for this worker: leave the job (the lease goes), so that no round waits for it. A
    // process exits after this anyway; a thread-rank (tests) keeps its Worker object.
    membership_.unwatch();
    membership_.stop();
    throw;
  } catch (const LeftBeforeAdmission&) {
    // Asked to leave (SIGTERM) while waiting in a rendezvous: e.g. evicted after a SIGSTOP and
    // ended by edl-run. Its state is the last commit; nobody waits for it.
    EDL_LOG(1) << "edl: worker " << opt_.membership.worker_id << " left the job while waiting to be admitted";
    membership_.unwatch();
    membership_.stop();
    return RunOutcome::kLeft;
  } catch (const JobFinished&) {
    if (view_.id != 0)  // it trained, was evicted (e.g. stopped too long) and missed the end: stale state
      throw JobError("edl: worker " + opt_.membership.worker_id + " was evicted after generation " +
                     std::to_string(view_.id) + " and the job finished before it could rejoin; its state is stale");
    EDL_LOG(1) << "edl: worker " << opt_.membership.worker_id << ": the job finished before it was admitted";
    return RunOutcome::kLeft;  // never a member (a Worker whose run() made its first join: tests)
  }
}

// Before the first generation trains: commits carry the job id and the job's lineage (a checkpoint of
// another job or lineage is refused); a state without a commit loads the job's checkpoint, else
// commits its initial values.
void Worker::adopt_state(State& state) {
  const Keys& k = membership_.keys();
  state_on_checkpoint_written(state, [this, k](int64_t step, const std::string& lineage) {
    record_checkpoint(k, step, lineage);
  });
  if (state.committed_step() < 0) {
    // A checkpoint must be of this job and (when the job has one already) of its lineage.
    state_set_identity(state, opt_.membership.job_id, store_->get(k.lineage()).value_or(""));
    if (!state.load_checkpoint()) {
      state_set_identity(state, opt_.membership.job_id, "");  // a fresh state belongs to no lineage yet
      commit();
    }
  } else {
    state_set_identity(state, opt_.membership.job_id, state_lineage(state));
  }
}

// The first sync of the state from the best member; a generation that fails during it is re-formed
// (form syncs the new one).
void Worker::sync_first_generation() {
  try {
    fault_point("sync");
    finish_generation(false);
  } catch (const CommError& e) {
    if (crashed_) throw;
    on_comm_failure(e.what());
    form(true);
  }
}

// After an agreed membership change: commits; a worker that announced its leave stops here (true;
// an evicted straggler throws StragglerEvicted), the others go on to the next generation (false).
bool Worker::commit_and_leave_if_announced(const State& state) {
  commit();
  since_commit_ = 0;
  stats().set_phase(leave_announced_ ? Phase::kDone : Phase::kRendezvous);
  if (!leave_announced_) return false;
  abandon_catch_up(/*restore=*/true);  // a newcomer leaving before it caught up keeps its own state
  EDL_LOG(1) << "edl: worker " << opt_.membership.worker_id << " left the job at step " << state.step
             << (evicted_ ? " (evicted as a straggler)" : "");
  membership_.unwatch();
  membership_.stop();
  if (evicted_)
    throw StragglerEvicted("edl: worker " + opt_.membership.worker_id + " was evicted as a straggler at step " +
                           std::to_string(state.step) + " (EDL_EVICT_STRAGGLERS / edl-run --evict-stragglers)");
  return true;
}

// Advances <job>/checkpoint to "<lineage> <step>" (never backwards within a lineage). Writer thread.
void Worker::record_checkpoint(const Keys& k, int64_t step, const std::string& lineage) {
  if (lineage.empty()) return;
  try {
    auto cur = store_->get(k.checkpoint());
    for (int i = 0; i < 8; ++i) {
      std::string cur_lineage;
      if (cur && parse_step(*cur, &cur_lineage) >= step && cur_lineage == lineage) return;
      if (store_->compare_set(k.checkpoint(), cur, lineage + " " + std::to_string(step), &cur)) return;
    }
  } catch (const Error& e) {
    EDL_LOG(1) << "edl: could not record checkpoint step " << step << " in the store: " << e.what();
  }
}

void Worker::notify_batch_end() {
  EDL_CHECK(in_run_ && state_ != nullptr, InvalidArgument,
            "edl::notify_batch_end() must be called inside edl::elastic::run");
  if (crashed_) throw AbortedError("simulated crash of worker " + opt_.membership.worker_id);
  membership_.check_store();  // the lease thread lost the store: nothing can keep this job elastic
  state_->step += 1;
  stats().batch_end(state_->step);
  const int64_t compute_us = observer_.measure_compute_us();
  membership_.progress();
  fault_point("batch_end");
  // The batch-boundary agreement: one 8-byte max-allreduce of the pending bits, started at this
  // boundary and evaluated at the next one, so it runs in the background during the next batch.
  // Every member evaluates the same request at the same boundary, so all of them change membership
  // at the same batch (or none does).
  // A member whose arrival at the next generation is prepared (below) leaves from that generation:
  // the decider may already list it.
  if (leave_requested_.load() && !leave_announced_ && !membership_.prepared_for(view_.id + 1)) {
    membership_.announce_leave(view_.id);
    leave_announced_ = true;
  }
  // The same request carries every member's step time (slot 1 + rank) and records (slot 1 + size +
  // rank): all members then see the same vectors at the same boundary, reach the same straggler
  // verdict and (rebalancing) the same split of the next steps' records.
  const bool agreed_here = flag_wait_ != nullptr;  // every member contributed to it: all built this generation
  if (flag_wait_) {
    auto wait = std::move(flag_wait_);
    flag_wait_ = nullptr;
    wait();
    const int64_t flag = agreement_[0];
    const auto records = agreement_.begin() + 1 + view_.size;
    gathered_.compute_us.assign(agreement_.begin() + 1, records);
    gathered_.records.assign(records, agreement_.end());
    gathered_.generation = view_.id;
    ++gathered_.seq;
    on_step_times(gathered_.compute_us);
    if (flag != 0)
      throw MembershipChanged(std::string("membership change at step ") + std::to_string(state_->step) + ": " +
                              ((flag & 2) ? "a worker leaves" : "a worker joins"));
  }
  agreement_.assign(1 + 2 * static_cast<size_t>(view_.size), 0);
  const bool join = membership_.change_pending();
  agreement_[0] = (leave_announced_ ? 2 : 0) | (join ? 1 : 0);
  // Stop-free joins: this join bit makes the next boundary a change to generation G+1 (whatever the
  // others contribute), and this member will be a survivor there: it arrives now, in the background,
  // and the rendezvous at that boundary takes the arrival ("Stop-free joins", step 3). Only once an
  // agreement of this generation came back from every member: none is still connecting to it (a
  // member that arrives at G+1 while another still connects to G fails G).
  if (server_ && join && !leave_announced_ && agreed_here) membership_.prepare_arrival(view_.id + 1);
  agreement_[1 + view_.rank] = compute_us;
  agreement_[1 + view_.size + view_.rank] = static_cast<int64_t>(step_records_.exchange(0));
  flag_wait_ = group()->allreduce_max_async(agreement_.data(), agreement_.size());
  if (view_.rank == 0) publish_throughput();
  // A stop-free newcomer fetches a chunk of the survivors' commit of this step instead of committing;
  // while one is connected, the survivors commit every step (the chunks come from these commits).
  bool committed = false;
  if (catch_up_) {
    catch_up_at_boundary(compute_us);
  } else if (++since_commit_ >= opt_.commit_every || (server_ && server_->has_clients())) {
    commit();
    since_commit_ = 0;
    committed = true;
  }
  if (server_ && !committed) server_->boundary(state_->step, nullptr);
}

void Worker::commit() {
  if (catch_up_) return;  // a newcomer still catching up holds no state worth committing (restore() returns to its own)
  timeline::Span span(timeline::Lane::kElastic, "commit");
  span.arg("generation", static_cast<int64_t>(view_.id)).arg("step", state_->step).arg("rank", view_.rank);
  state_->commit();
  stats().committed();
  if (server_) server_->boundary(state_->step, state_commit(*state_));
}

// The rendezvous, on the timeline with the generation it formed.
GenerationView Worker::rendezvous(const GenerationView* previous) {
  const int64_t t0 = timeline::now_us();
  // The commit this worker arrives with rides in the decision, so that the sync of the new
  // generation needs no allgather when every member reported one (sync_generation_state). A
  // newcomer that joins before run() has no State yet; a stop-free join syncs its own way.
  membership_.set_arrival_note(state_ && !server_ ? state_sync_note(*state_) : "");
  GenerationView v = membership_.rendezvous(previous);
  if (timeline::on()) {
    timeline::Event e(timeline::Lane::kElastic, "rendezvous");
    e.span(t0, timeline::now_us()).arg("generation", static_cast<int64_t>(v.id)).arg("rank", v.rank);
    e.arg("size", v.size).arg("previous_size", v.previous_size);
    timeline::record(e);
  }
  return v;
}

}  // namespace edl::elastic
