// Elastic training: the retry loop and the batch-boundary hook (protocol: docs/elastic.md).
//
//   edl::init();                                  // EDL_ELASTIC=1 (set by edl-run --min-np/--max-np)
//   edl::elastic::State state;
//   state.register_tensor("params", w.data(), w.size(), edl::DataType::kFloat32);
//   auto outcome = edl::elastic::run(state, [&] {
//     while (state.step < total_steps) {
//       compute(grad); edl::allreduce(grad.data(), grad.size(), edl::DataType::kFloat32); update(w, grad);
//       edl::notify_batch_end();                  // step++, agreement on joins/leaves, commit
//     }
//   });
//   if (outcome == edl::elastic::RunOutcome::kFinished && edl::rank() == 0) report(w);
//   edl::shutdown();
//
// run(state, fn) calls fn and handles what interrupts it:
//   - a peer failure (any CommError: peer lost, deadline, abort): state.restore() to the last
//     commit, re-rendezvous without the dead worker, sync, call fn again;
//   - a membership change agreed at a batch boundary (a worker joins, or leaves after SIGTERM):
//     notify_batch_end throws MembershipChanged; run commits, re-rendezvouses, syncs and calls fn
//     again with no step lost;
//   - an error a restart cannot cure (MismatchError, DataError, any other exception of fn that is
//     not a CommError): the job fails at once — <job>/failed holds the reason and every member's
//     run throws JobFailed; exit with kJobFailedExitCode (3). EDL_RETRY_USER_ERRORS=1 retries
//     them like peer failures instead;
//   - JobError (reset limit reached, fewer than the minimum workers for longer than
//     EDL_RENDEZVOUS_TIMEOUT_MS, all members lost and no checkpoint) propagates: exit cleanly;
//   - StoreError (AuthError included: the control-plane store is unreachable for longer than
//     EDL_STORE_TIMEOUT_MS, or refuses the secret) propagates at once: there is nothing to
//     re-rendezvous against (edl-run fails the job when the store is lost).
// Before a JobError leaves run, the worker leaves the job (its lease is removed); after a StoreError
// its lease expires in the store on its own.
// run returns a RunOutcome (below): kFinished when fn returned (training is over), kLeft when this
// worker left the job (SIGTERM, request_leave()). A worker that trained, was evicted and missed the
// end gets JobError (its state is stale); a late joiner finds a finished job already in edl::init()
// (JobError). fn must be restartable: it continues from state.step.
//
// After run: in an elastic job, edl::rank() / edl::size() keep the values of the generation in
// which training finished only when run returned kFinished. When it returned kLeft, or threw, this
// process is no longer a member of any generation: edl::rank() and
// edl::local_rank() return -1, edl::size() and edl::local_size() return 0, and a collective
// (edl::allreduce, ...) throws InvalidArgument. In a static world (no EDL_ELASTIC) nothing changes.
//
// Thread-safety: run() and notify_batch_end() from the training thread only.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <string>

#include "edl/error.h"
#include "edl/export.h"
#include "edl/state.h"

namespace edl {
namespace elastic {

// The exit status a worker process uses when the job failed for good (JobFailed): edl-run then
// fails the job at once instead of restarting workers. edl-run also reads `<job>/failed`.
constexpr int kJobFailedExitCode = 3;

// The job failed with an error a restart cannot cure: a MismatchError, a DataError or any other
// exception out of the user's function (unless EDL_RETRY_USER_ERRORS=1). run() throws it on every
// member; the reason is also stored at `<job>/failed`. cause() is the original exception on the
// worker where it happened (null elsewhere). A JobError, so `catch (const JobError&)` still works.
class EDL_API JobFailed : public JobError {
 public:
  explicit JobFailed(const std::string& reason, std::exception_ptr cause = nullptr)
      : JobError("edl: job failed: " + reason), reason_(reason), cause_(std::move(cause)) {}
  const std::string& reason() const { return reason_; }
  std::exception_ptr cause() const { return cause_; }

 private:
  std::string reason_;
  std::exception_ptr cause_;
};

// This worker was evicted as a straggler (EDL_EVICT_STRAGGLERS, edl-run --evict-stragglers): it left
// the job at a batch boundary after committing; the others go on without it. A JobError, so a
// worker process exits non-zero and edl-run restarts its slot after the slot's cooldown, as after a
// failure (docs/observability.md, "Stragglers").
class EDL_API StragglerEvicted : public JobError {
 public:
  using JobError::JobError;
};

// How edl::elastic::run ended on this worker.
enum class RunOutcome : uint8_t {
  kFinished,     // fn returned on this worker: training is over. The job is marked finished (late
                 // joiners leave quietly); rank() / size() are those of the last generation.
  kLeft,         // this worker left the job: SIGTERM or request_leave(), at a batch boundary (after
                 // committing; state.step is where it stopped, not the end of training) or while it
                 // waited to be admitted again (e.g. evicted after a SIGSTOP and ended by edl-run).
                 // The others go on without it; rank() is -1 and size() 0 from now on.
};

// "finished", "left".
EDL_API const char* outcome_name(RunOutcome outcome);

// The retry loop of an elastic job (see above); returns how it ended on this worker. Without
// EDL_ELASTIC=1 (a static world) it loads the checkpoint (EDL_CHECKPOINT_DIR) or commits the initial
// state, syncs the state from the best member once (State::sync: the highest committed step, so a
// rank that loaded a newer checkpoint wins over rank 0) and calls fn once: it returns kFinished, and
// every error propagates unchanged (no retry, no <job>/failed).
EDL_API RunOutcome run(State& state, const std::function<void()>& fn);

// Asks this worker to leave at the next batch boundary (what SIGTERM does in an elastic job).
EDL_API void request_leave();

// True while this worker is a newcomer of a stop-free join (EDL_JOIN=stopfree) that is still
// receiving the job's state, chunk by chunk at batch boundaries, while the job trains on
// (docs/elastic.md, "Stop-free joins"). Meanwhile it must train no records and contribute a zero
// gradient: ShardGenerator::next() gives it empty steps and DistributedOptimizer::set_step_samples(0)
// weighs its gradient to zero; a loop averaging gradients itself zeroes its own (and may skip the
// step's compute, which gives it the time to receive the next chunk). False in every other worker,
// outside run(), and outside elastic mode. Training thread.
EDL_API bool catching_up();

// Deprecated: edl::set_samples_per_batch(samples) sets the same number (it used to be two setters,
// one for edl-run's metrics and one for the autoscaling throughput); this forwards to it.
[[deprecated("use edl::set_samples_per_batch(n): one setter for the samples per batch (metrics and autoscaling)")]]
EDL_API void set_local_batch_size(int64_t samples);

}  // namespace elastic

// One batch finished: state.step += 1; all members agree (one 8-byte allreduce) whether a join or a
// graceful leave is pending — if so, throws MembershipChanged for run() to handle — and commits the
// state every EDL_COMMIT_EVERY batches (default 1). Call it only inside elastic::run.
EDL_API void notify_batch_end();

// How many samples each batch of this worker holds (its local batch size), for edl-run's metrics
// (samples per second, goodput; docs/observability.md, "Metrics") and, in an elastic job, for the
// throughput rank 0 publishes for edl-run's autoscaling advice ("Autoscaling": samples/s when set,
// batches x workers / s when not). Not set or 0 (the default): not known, samples count batches.
// samples < 0: InvalidArgument. Any thread, any time, before or after init().
EDL_API void set_samples_per_batch(int64_t samples);

}  // namespace edl
