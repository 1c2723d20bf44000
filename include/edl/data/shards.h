// edl::data::ShardGenerator — the elastic shard dispatcher: every record of every epoch is trained
// exactly once in the model that survives, whatever joins, leaves or dies (protocol: docs/data.md).
//
// The dataset's N records are cut into shards of records_per_shard (ElasticDL's "records per task").
// Each epoch visits the shards in an order shuffled from (seed, epoch) — the same on every worker and
// after restarts — and, optionally, the records inside a shard in a shuffled order too. A worker that
// needs work claims the next free shard with a compare_set on the store; it then consumes the shard
// batch_size records per training step until the shard is exhausted and claims the next one.
//
// Exactly-once through commits. A claim is written BEFORE the worker trains its first batch and says
// "worker w consumes shard k from offset o, b records per step, starting at step t0". So the offset of
// every shard at any step is a pure function of the claims — nothing is reported per batch, and
// notify_batch_end costs no store round trip. The committed snapshot (save()) is the table of shard
// offsets at the commit's step; a rollback (load()) reinstates it, and each membership generation
// claims in a fresh store namespace seeded from that committed table, so records trained after the
// last commit are trained again by someone and shards of a worker that left continue from their
// committed offset on another worker. Register the generator with State::register_component: it
// follows commit / restore / sync / checkpoint resume like the model does.
//
// Epochs: an epoch ends when all its shards are exhausted; a worker that finds no free shard gets an
// empty step (it still joins the step's allreduce with zero gradient) until then. Every member sees
// the same epoch at the same step, so no shard of epoch e+1 is handed out while one of e is pending.
//
// Contract: synchronous data-parallel training — every member calls next() exactly once per training
// step (the step's records are then trained, or the whole step is rolled back by a failure).
//
// Reproducible mode (options.deterministic, docs/data.md "Reproducible mode"): no claims; a step is
// micro_batches fixed micro-batches of batch_size records, which records depending only on (seed,
// epoch, step) — never on the world size, which only decides which rank trains which micro-batches.
// With DistributedOptimizerOptions::deterministic the trained parameters then do not depend on the
// world size, on failures or on joins (docs/optim.md, "Reproducible mode").
//
// Straggler rebalancing (options.rebalance, edl-run --rebalance-stragglers): slower ranks get fewer
// records per step and faster ones more, from the measured compute time per record; the global batch
// (and exactly-once) stays as it is (docs/data.md, "Straggler rebalancing").
//
// Thread-safety: one ShardGenerator per worker, used from the training thread. The store may be
// shared by any number of workers (memory://, tcp://, redis://).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "edl/export.h"
#include "edl/state.h"
#include "edl/store.h"

namespace edl::data {

struct ShardOptions {
  uint64_t records = 0;              // N records in the dataset (> 0)
  uint64_t records_per_shard = 0;    // records per shard (> 0)
  uint64_t batch_size = 0;           // records this worker trains per step (> 0)
  // Optional: the local batch for a world of `size` workers, applied at every new generation (so
  // the generator follows a batch policy that keeps the global batch fixed), e.g.
  //   [&](int size) { return edl::optim::plan_batch(policy.batch, size).local_batch; }
  // Empty (default): batch_size at every world size. Must return > 0 (InvalidArgument otherwise).
  std::function<uint64_t(int size)> batch_for_size;
  uint64_t seed = 0;                 // shuffle seed (shard order and record order)
  bool shuffle_records = true;       // also shuffle the records inside each shard per epoch
  int64_t epochs = 0;                // > 0: next() reports end_of_data once this many epochs are done; 0 = endless
  std::string name = "shards";       // store namespace (several datasets may share a store)
  std::string worker_id;             // who holds a claim (diagnostics); "" = "rank<r>" at on_generation
  // Reproducible mode: every step trains `micro_batches` micro-batches of batch_size records over the
  // whole job, whatever its size (batch_for_size must be empty). Default off; programs built for it
  // set it from edl::deterministic() (EDL_DETERMINISTIC=1). Needs micro_batches > 0.
  bool deterministic = false;
  uint64_t micro_batches = 0;        // reproducible mode: micro-batches per step (global batch / batch_size)
  // Straggler rebalancing: split the generation's global batch (batch_size x size, or micro_batches
  // in the reproducible mode) by the measured speed of the ranks. Default off; the constructor on the
  // job's store turns it on under EDL_REBALANCE_STRAGGLERS=1 (edl-run --rebalance-stragglers). Takes
  // effect in elastic jobs (the elastic runtime measures the steps) or through observe_step().
  bool rebalance = false;
};

// Reproducible mode: one micro-batch of a step, records[begin, begin + size) of StepRecords::records.
struct MicroBatch {
  uint64_t index = 0;  // its place in the step, 0 .. micro_batches - 1 (the same at every world size)
  size_t begin = 0;
  size_t size = 0;
};

// What one worker trains at one step.
struct StepRecords {
  int64_t step = 0;               // the generator's step counter (steps drawn since the start)
  int64_t epoch = 0;              // epoch these records belong to
  int64_t shard = -1;             // shard they come from (0 in the reproducible mode); -1 when the
                                  // worker has nothing this step
  uint64_t offset = 0;            // position of records[0] inside the shard (reproducible mode: the epoch)
  std::vector<uint64_t> records;  // dataset record indices; empty = wait for the epoch to end
  bool end_of_data = false;       // options.epochs are done: stop training
  // Reproducible mode: this worker's micro-batches of the step (records is their concatenation), in
  // index order; train each as its own backward pass (DistributedOptimizer::begin_micro_batch).
  std::vector<MicroBatch> micro_batches;
};

class EDL_API ShardGenerator : public elastic::Stateful {
 public:
  // Uses `store` (all workers of the job must pass the same store; keys live under options.name).
  ShardGenerator(std::shared_ptr<Store> store, ShardOptions options);
  // Uses the job's store; call it after edl::init() (InvalidArgument before, in a launched process).
  // In a world without a launcher: a private in-memory store.
  explicit ShardGenerator(ShardOptions options);
  ~ShardGenerator() override;

  // The records this worker trains at the next step (see the contract above). StoreError when the
  // store fails.
  StepRecords next();

  // The steps that follow the last next(), as far as they are already decided: the rest of the shard
  // this worker holds (at most `steps` entries; empty when it holds none). For prefetching — a rollback
  // or a new generation may still change them (compare with what next() returns).
  std::vector<StepRecords> lookahead(size_t steps) const;

  int64_t epoch() const;
  int64_t step() const;
  // Records per step of this worker in this generation (batch_size, or batch_for_size(world size)).
  uint64_t batch_size() const;
  // This worker's batches drawn at steps < committed_step() are in the last commit (its own, or the
  // snapshot it adopted at a sync); later ones are not yet and are trained again after a rollback.
  int64_t committed_step() const;
  // This worker's batches that became committed since the last call, oldest first (at most the
  // newest 4096 are kept; `dropped`, when given, receives how many older ones were dropped).
  // Batches rolled back by a failure never appear.
  std::vector<StepRecords> take_committed(size_t* dropped = nullptr);
  uint64_t num_shards() const;
  // Shard order of an epoch (a permutation of [0, num_shards())).
  std::vector<uint64_t> shard_order(int64_t epoch) const;
  // Record indices of a shard in the order they are trained in that epoch.
  std::vector<uint64_t> shard_records(int64_t epoch, uint64_t shard) const;

  // Rebalancing: the records (reproducible mode: micro-batches) of each rank per step now; empty
  // without options.rebalance.
  std::vector<uint64_t> rebalanced_batches() const;
  // Rebalancing input for a generator on an explicit store: every rank's compute seconds and records
  // of one step (indexed by rank, identical on every member), given on every member between the same
  // two steps. The job's generator (ShardGenerator(options) in an elastic job) gets them from the
  // elastic runtime by itself.
  void observe_step(const std::vector<double>& compute_s, const std::vector<uint64_t>& records);

  // Stateful: the committed table of shard offsets; restores it; starts a new claim namespace.
  std::string save() override;
  void load(const std::string& snapshot) override;
  void on_generation(const elastic::GenerationInfo& info) override;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace edl::data
