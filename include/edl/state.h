// edl::elastic::State — the training state that survives failures and resizes.
//
// Register everything training needs to continue (model parameters, optimizer slots, BN running
// statistics, epoch/step counters, RNG state, data-shard progress, user blobs). Then:
//   commit()   snapshots every registered item in memory (and, with a checkpoint directory, on disk
//              so a whole-job restart resumes; written atomically with a checksum by rank 0 of the
//              generation, in the background). All members commit at the same step.
//   restore()  rolls every item back to the last commit (after a peer failure).
//   sync()     collective on the current generation: every member takes the state of the best
//              member — the highest committed step; among equal steps a member that was synced
//              before beats a fresh one (a newcomer that never synced); then the lowest rank.
//              Never blindly rank 0, which may be a newcomer.
// Components with their own commit protocol (the shard dispatcher, the optimizer's rescaling
// bookkeeping) implement Stateful and are registered with register_component(); they also get
// on_generation() after each rendezvous.
//
// Thread-safety: a State is used by the training thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "edl/export.h"
#include "edl/types.h"

namespace edl::elastic {

// This worker's place in a new generation.
enum class GenerationRole : uint8_t {
  kNewcomer,    // its first generation (a fresh start, a joiner, a restarted process)
  kSurvivor,    // it was a member of the previous generation (generation - 1) and goes on
  kReadmitted,  // it was a member of an earlier generation, was left out of the ones in between
                // (evicted: stopped, stuck or cut off longer than the lease) and is admitted again
};

// Why the membership changed from generation - 1 to generation. Decided once, by the worker that
// decided the generation, from the store's record of the round (who was a member before, who left
// gracefully, who was dropped and why, whether the previous generation was aborted) and published
// with the member list, so every member of the generation gets the same reason — a readmitted
// worker too, whatever its own path (docs/elastic.md, "Generation facts"). When several apply: a
// member that died (failure), else a live member left out (eviction), else an aborted previous
// generation (failure), else a graceful leave, else a join.
enum class ChangeReason : uint8_t {
  kStart,     // the first generation of the job (or of a job restarted after all members were lost)
  kJoin,      // workers joined — newcomers or readmitted members (or a join was requested and the
              // joiner did not make it); no member of the previous generation is missing
  kLeave,     // members left gracefully at a batch boundary (SIGTERM, request_leave)
  kFailure,   // a member died (lease gone, probe refused) or the previous generation was aborted
              // (peer lost, collective deadline, a failure while it was being built)
  kEviction,  // a member that was still alive was left out (stuck past EDL_RENDEZVOUS_GRACE_MS)
};

// "newcomer", "survivor", "readmitted".
EDL_API const char* role_name(GenerationRole role);
// "start", "join", "leave", "failure", "eviction".
EDL_API const char* reason_name(ChangeReason reason);

// Facts about a new membership generation, handed to Stateful::on_generation and reset callbacks.
// generation, size, previous_size and reason are the same on every member of the generation; rank,
// after_failure, role and previous_generation are this worker's own.
struct GenerationInfo {
  uint64_t generation = 0;     // generations are numbered 1, 2, ... per job
  int rank = 0;
  int size = 1;
  int previous_size = 0;       // size of generation - 1 (the decider's record); 0 at the first generation
                               // and after all members were lost
  bool after_failure = false;  // this worker reached the generation through restore() (a failure of
                               // its own previous generation: a peer failed, or it was stopped)
  GenerationRole role = GenerationRole::kNewcomer;
  // The generation this worker was last a member of before this one: 0 for a newcomer,
  // generation - 1 for a survivor, an older one for a readmitted worker.
  uint64_t previous_generation = 0;
  ChangeReason reason = ChangeReason::kStart;
};

// A component with state of its own that follows commit / restore / sync.
class EDL_API Stateful {
 public:
  virtual ~Stateful();
  // Bytes describing the component's state at this commit (called on every member at commit()).
  virtual std::string save() = 0;
  // Replaces the component's state with a snapshot taken by save() — this member's own last commit
  // (restore) or the best member's (sync, checkpoint resume).
  virtual void load(const std::string& snapshot) = 0;
  // Called after each rendezvous, once the state is synced; default: nothing.
  virtual void on_generation(const GenerationInfo& info);
};

class EDL_API State {
 public:
  State();
  ~State();
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  // --- registration (before run(); the caller keeps the memory alive) ---------------------------
  void register_tensor(const std::string& name, void* data, size_t count, DataType dtype);
  void register_scalar(const std::string& name, int64_t* value);
  void register_blob(const std::string& name, std::function<std::string()> save,
                     std::function<void(const std::string&)> load);
  void register_component(const std::string& name, Stateful* component);
  // Called after each rendezvous (after sync), e.g. to rescale the learning rate.
  void on_generation(std::function<void(const GenerationInfo&)> callback);

  // --- protocol ---------------------------------------------------------------------------------
  // Counters kept by the state itself and committed with it.
  int64_t epoch = 0;
  int64_t step = 0;  // global step: incremented by the user loop (or notify_batch_end)

  // Memory: a State holds two host buffers the size of its encoded state — the last commit and a
  // spare the next commit() writes into (no allocation per commit); a third only while a
  // checkpoint write or a stop-free newcomer still reads an older commit.
  void commit();
  void restore();
  // Collective on the current generation (inside edl::elastic::run; InvalidArgument elsewhere).
  // Members allgather (committed step, fresh, size of the commit), where fresh = this State was
  // never synced before.
  // The best member is the one with the highest committed step; among equal steps a member that
  // was synced before beats a fresh one (so a newcomer holding the initial state at the same step
  // never overwrites the job's state); then the lowest rank. When every member holds the same step
  // and none is fresh nothing moves; otherwise the best member broadcasts its last commit, every
  // other member adopts it and the best member restores its own commit (uncommitted work is
  // discarded everywhere). InvalidArgument when no member has committed yet.
  void sync();
  // Step of the last commit (-1 before the first).
  int64_t committed_step() const;
  // Where commits are persisted ("" = memory only). Default: EDL_CHECKPOINT_DIR. Files are written
  // by a background thread (commit() never waits for the disk; when it falls behind only the newest
  // commit is written). A failed write is logged and retried until it succeeds or a newer commit
  // replaces it; it never throws into training (see checkpoint_error()). A file is never replaced by
  // one of an older step.
  void set_checkpoint_dir(const std::string& dir);
  // Blocks until every commit handed to the checkpoint writer was written or tried once.
  void flush_checkpoint();
  // The error of the last checkpoint write ("" when it succeeded or none was tried).
  std::string checkpoint_error();
  // Loads the newest persisted commit, if any; returns whether one was loaded. A file of another
  // job or of an older lineage (docs/elastic.md, "Lineage") is a DataError naming the file.
  bool load_checkpoint();

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace edl::elastic
