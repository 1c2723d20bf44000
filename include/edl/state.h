// edl::elastic::State — the training state that survives failures and resizes.
//
// Register everything training needs to continue (model parameters, optimizer slots, BN running
// statistics, epoch/step counters, RNG state, data-shard progress, user blobs). Then:
//   commit()   snapshots every registered item in memory (and, with a checkpoint directory, on disk
//              so a whole-job restart resumes; written atomically with a checksum by rank 0 of the
//              generation, in the background). All members commit at the same step.
//   restore()  rolls every item back to the last commit (after a peer failure).
//   sync()     collective on the current generation: every member takes the state of the member
//              with the highest committed step (ties: lowest rank) — never blindly rank 0, which
//              may be a newcomer.
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

// Facts about a new membership generation, handed to Stateful::on_generation and reset callbacks.
struct GenerationInfo {
  uint64_t generation = 0;
  int rank = 0;
  int size = 1;
  int previous_size = 0;     // 0 at the first generation
  bool after_failure = false;  // true when reached through restore() (a peer failed)
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

  void commit();
  void restore();
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
