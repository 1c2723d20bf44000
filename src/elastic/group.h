// Group: the collectives the elastic runtime itself needs on one membership generation (the
// batch-boundary agreement and State::sync), over whatever carries the user's collectives.
//
//   CommGroup      a Communicator used directly (ranks as threads in tests, tools).
//   RuntimeGroup   (api.cc) the process-wide Runtime generation, through its collective engine so
//                  the runtime's small collectives never race the engine thread on the socket.
// A Group belongs to one generation; after any CommError it is poisoned (like its Communicator).
// Thread-safety: collectives from one thread at a time; abort() from any thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "edl/communicator.h"
#include "edl/export.h"
#include "edl/state.h"
#include "edl/types.h"

namespace edl::elastic {

struct GenerationView;

class EDL_API Group {
 public:
  virtual ~Group();
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void allreduce(void* data, size_t count, DataType dtype, ReduceOp op) = 0;
  virtual void broadcast(void* data, size_t count, DataType dtype, int root) = 0;
  virtual void allgatherv(const void* in, size_t count, DataType dtype, std::vector<uint8_t>& out,
                          std::vector<size_t>* counts) = 0;
  virtual void abort(const std::string& reason) = 0;
  // Starts a max-allreduce of `count` int64 in place; the returned function waits for it (rethrowing
  // its error). The default runs it at once; the runtime's group overlaps it with the next batch.
  virtual std::function<void()> allreduce_max_async(int64_t* values, size_t count) {
    allreduce(values, count, DataType::kInt64, ReduceOp::kMax);
    return [] {};
  }
  // The underlying communicator (tests and thread-ranks run their own collectives on it).
  virtual std::shared_ptr<Communicator> communicator() const = 0;
};

class EDL_API CommGroup final : public Group {
 public:
  explicit CommGroup(std::shared_ptr<Communicator> comm) : comm_(std::move(comm)) {}
  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  void allreduce(void* d, size_t n, DataType t, ReduceOp op) override { comm_->allreduce(d, n, t, op); }
  void broadcast(void* d, size_t n, DataType t, int root) override { comm_->broadcast(d, n, t, root); }
  void allgatherv(const void* in, size_t n, DataType t, std::vector<uint8_t>& out,
                  std::vector<size_t>* counts) override {
    comm_->allgatherv(in, n, t, out, counts);
  }
  void abort(const std::string& reason) override { comm_->abort(reason); }
  std::shared_ptr<Communicator> communicator() const override { return comm_; }

 private:
  std::shared_ptr<Communicator> comm_;
};

// Builds the Group of a freshly decided generation; `comm_prefix` is the generation-scoped store
// prefix for the communicator's bootstrap keys.
using GroupFactory = std::function<std::shared_ptr<Group>(const GenerationView& view, const std::string& comm_prefix)>;

// The Group of the elastic generation the calling thread is running in (set by Worker::run), or null.
EDL_API Group* current_group();
void set_current_group(Group* g);

// State internals used by the worker (state.cc).
// sync; returns true when no member had been synced before (a fresh start: the first generation of
// a job, or every member of the last generation was lost).
EDL_API bool sync_state(State& s, Group& g);
// The same sync from the notes the members arrived with (the decision carries them, in rank order):
// the allgather is skipped. A member without a note ("": a newcomer that joined before its State
// existed) counts as fresh with nothing committed; with no note at all, or a malformed one, the
// allgather runs. Each member checks its own note (or, without one, that its commit would not
// change the plan) against its state; a mismatch fails the generation (CommError).
EDL_API bool sync_state(State& s, Group& g, const std::vector<std::string>& notes);
// "c<committed step>.<fresh 0|1>.<commit bytes>": what sync_state's allgather would carry from this
// member; "" while nothing is committed.
EDL_API std::string state_sync_note(State& s);
void state_set_persist(State& s, bool persist);
// The job id and lineage stamped into every commit from now on (and into the last one).
EDL_API void state_set_identity(State& s, const std::string& job, const std::string& lineage);
EDL_API const std::string& state_lineage(State& s);
// Called by the checkpoint writer thread after a file of `step` (of `lineage`) was written.
void state_on_checkpoint_written(State& s, std::function<void(int64_t step, const std::string& lineage)> cb);
const std::string& state_committed_bytes(State& s);
const std::string& state_checkpoint_dir(State& s);
void state_adopt(State& s, std::string bytes, const std::string& origin);
void state_notify_generation(State& s, const GenerationInfo& info);

}  // namespace edl::elastic
