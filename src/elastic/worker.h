// Worker: one elastic worker — membership, the current generation's Group, and the retry loop
// behind edl::elastic::run and edl::notify_batch_end (docs/elastic.md, "The run loop").
//
// The process-wide worker is created by the Runtime in elastic mode (api.cc); tests create one
// Worker per thread-rank over a shared memory store with a GroupFactory of their choice.
//
// Thread-safety: run()/notify_batch_end()/join() from the training thread; request_leave() from
// any thread or a signal handler; simulate_crash() from any thread (tests).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "edl/elastic.h"
#include "edl/export.h"
#include "edl/state.h"
#include "edl/store.h"
#include "elastic/group.h"
#include "elastic/membership.h"
#include "elastic/snapshot.h"
#include "elastic/state_fetch.h"
#include "elastic/state_server.h"
#include "elastic/step_observer.h"
#include "elastic/straggler.h"

namespace edl::elastic {

// Stop-free joins (docs/elastic.md, "Stop-free joins").
struct StopFreeOptions {
  bool enabled = false;                         // EDL_JOIN=stopfree (default stop: newcomers are synced at the join)
  double fetch_share = 0.5;                     // EDL_JOIN_FETCH_SHARE: the share of the survivors' compute time per
                                                // step a newcomer may spend receiving state at a boundary
  uint64_t max_chunk_bytes = 0;                 // EDL_JOIN_MAX_CHUNK_BYTES: at most this much per boundary (0 = no cap)
  std::string secret;                           // EDL_JOB_SECRET: proved on every state-server connection
  std::chrono::milliseconds io_timeout{30000};  // EDL_TIMEOUT_MS: a state server silent this long is lost
};

struct WorkerOptions {
  MembershipOptions membership;
  int reset_limit = -1;          // EDL_RESET_LIMIT: max re-rendezvous after the first (-1 = unlimited, 0 = none)
  int commit_every = 1;          // EDL_COMMIT_EVERY: notify_batch_end commits every N batches
  std::string checkpoint_dir;    // EDL_CHECKPOINT_DIR: default checkpoint dir of the State ("" = none)
  // EDL_RETRY_USER_ERRORS: false (default) = an exception out of fn that is not a peer failure
  // (MismatchError, DataError, any user exception) fails the job at once (JobFailed, <job>/failed);
  // true = treat it like a peer failure (restore, re-form, call fn again; counts against the reset limit).
  bool retry_user_errors = false;
  // EDL_ALLOW_RESTART_FROM_SCRATCH (edl-run --allow-restart-from-scratch): when every member of the
  // last generation is lost and no checkpoint of the job's lineage can be loaded, start a new
  // lineage from the initial state instead of failing with JobError.
  bool allow_restart_from_scratch = false;
  // EDL_STRAGGLER_FACTOR / EDL_STRAGGLER_STEPS / EDL_EVICT_STRAGGLERS (docs/observability.md).
  StragglerOptions stragglers;
  StopFreeOptions stop_free;
};

class EDL_API Worker {
 public:
  Worker(std::shared_ptr<Store> store, WorkerOptions options, GroupFactory factory);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // First rendezvous and Group (idempotent). Throws JobError / JobFinished / StoreError.
  void join();
  // The retry loop; see edl::elastic::run. Returns kFinished when fn returns, kLeft when this worker
  // left after request_leave() or, when run() made its first join, found the job already finished.
  RunOutcome run(State& state, const std::function<void()>& fn);
  // See edl::notify_batch_end.
  void notify_batch_end();
  // Graceful leave at the next batch boundary (async-signal-safe).
  // A worker waiting in a rendezvous inside run() (e.g. evicted, waiting to be admitted again)
  // leaves from there instead: run() returns.
  void request_leave() {
    leave_requested_.store(true);
    if (in_run_.load()) membership_.request_leave();
  }
  bool in_run() const { return in_run_.load(); }

  std::shared_ptr<Group> group() const;
  const GenerationView& view() const { return view_; }
  int resets() const { return resets_; }
  Membership& membership() { return membership_; }
  const std::shared_ptr<Store>& store() const { return store_; }
  // Straggler counters and the latest gathered step times (any thread; for a metrics exporter).
  StragglerStats straggler_stats() const { return observer_.stats(); }
  // True while this worker is a newcomer of a stop-free join still receiving the state (edl::elastic::catching_up).
  bool catching_up() const { return catch_up_ != nullptr; }
  // This worker's state server (null unless stop-free joins are on).
  const StateServer* state_server() const { return server_.get(); }
  // Samples per batch of this worker (edl::set_samples_per_batch); 0 = unknown.
  void set_local_batch_size(int64_t samples) { local_batch_.store(samples); }
  // The records of this worker's current step (the shard dispatcher tells it at next()), gathered
  // with the step times at the next batch boundary.
  void note_step_records(uint64_t records) { step_records_.store(records); }
  // The latest gathered step: every rank's compute time and records (the same on every member at the
  // same boundary). False before the first one of `generation`. Training thread.
  bool step_times(uint64_t generation, uint64_t* seq, std::vector<int64_t>* compute_us,
                  std::vector<int64_t>* records) const;

  // Test hook: behave like a process that just died — heartbeats stop (the lease expires), the
  // communicator is aborted, and run() throws AbortedError without rejoining.
  void simulate_crash();

 private:
  void form(bool after_failure);
  GenerationView rendezvous(const GenerationView* previous);  // membership_.rendezvous + timeline
  void commit();                                               // state_->commit() + timeline
  void install(const GenerationView& v);
  void on_failure(const std::string& reason);
  void count_reset(const std::string& why);
  void finish_generation(bool after_failure);
  void fault_point(const std::string& point);
  [[noreturn]] void fail_job(std::exception_ptr cause);
  void on_comm_failure(const std::string& why);
  void check_lineage();
  void record_checkpoint(const Keys& k, int64_t step, const std::string& lineage);
  // The named steps of run() (worker.cc).
  void adopt_state(State& state);
  void sync_first_generation();
  bool commit_and_leave_if_announced(const State& state);
  // Batch-boundary observability: straggler verdicts on the gathered step times, rank 0's reports
  // and throughput samples in the store (docs/observability.md).
  void on_step_times(const std::vector<int64_t>& compute_us);
  void publish_throughput();
  void training_resumes();
  // Stop-free joins (worker_stopfree.cc).
  void start_state_server();
  bool sync_generation_state();
  void catch_up_at_boundary(int64_t compute_us);
  void caught_up();
  void finish_catch_up();
  void abandon_catch_up(bool restore);

  std::shared_ptr<Store> store_;
  WorkerOptions opt_;
  GroupFactory factory_;
  Membership membership_;
  GenerationView view_;
  uint64_t previous_generation_ = 0;  // the generation this worker was a member of before view_ (0 = none)
  bool joined_ = false;
  mutable std::mutex mu_;  // guards group_
  std::shared_ptr<Group> group_;
  std::shared_ptr<std::atomic<bool>> building_cancel_;  // the generation being built (install())
  State* state_ = nullptr;
  int resets_ = 0;
  int since_commit_ = 0;
  bool leave_announced_ = false;
  // The batch-boundary agreement in flight (see notify_batch_end): [0] = the pending bits, [1 + r] =
  // the compute time of rank r's last step in microseconds, [1 + size + r] = its records
  // (max-allreduce of one-hot entries).
  std::vector<int64_t> agreement_;
  std::atomic<uint64_t> step_records_{0};
  struct Gathered {  // the latest evaluated agreement's step times (rebalancing, src/data)
    uint64_t generation = 0, seq = 0;
    std::vector<int64_t> compute_us, records;
  } gathered_;
  StepObserver observer_;
  std::atomic<int64_t> local_batch_{0};
  bool evicted_ = false;                 // this worker leaves as a straggler (run() throws StragglerEvicted)
  std::function<void()> flag_wait_;
  std::atomic<bool> leave_requested_{false};
  std::atomic<bool> in_run_{false};
  std::atomic<bool> crashed_{false};
  std::atomic<bool> failed_{false};  // the watch saw a failure of the current generation
  std::chrono::steady_clock::time_point recovery_since_{};  // failure seen, training not resumed yet (metrics)
  int64_t replayed_ = 0;                                     // steps rolled back in that recovery
  std::unique_ptr<StateServer> server_;                      // stop-free joins: this member's commits for newcomers
  std::unique_ptr<CatchUp> catch_up_;                        // non-null while this newcomer fetches the state
  SnapshotIdentity catch_identity_;                          // the identity of the state it fetches
  std::chrono::steady_clock::time_point catch_since_{};
  std::atomic<bool> fetch_cancel_{false};                    // set when the generation fails: ends a fetch
};

// The Worker whose run() the calling thread is in (edl::elastic::catching_up()).
void set_current_worker(const Worker* w);

}  // namespace edl::elastic
