// ShardGenerator::Impl (private to src/data): the dispatcher's state and the claim protocol of
// docs/data.md ("Shard dispatcher"), shared by shard_generator.cc (the public methods),
// shard_fixed.cc (the reproducible mode's fixed schedule) and shard_rebalance.cc (straggler
// rebalancing).
//
// Store keys, under "<options.name>/":
//   g<G>/s<C>/e<E>/<k>   the claim of shard k of epoch E in the claim namespace opened at step C in
//                        generation G: "<t0> <offset> <batch> <worker>" — written once, by compare_set
//                        from absent, never modified (so every worker may cache it forever).
// The committed snapshot (save/load) is the table of shard offsets at a step; a namespace starts from
// the committed table, so claims made after the commit simply vanish with their namespace on rollback.
// Thread-safety: as ShardGenerator (the training thread).
#pragma once

#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/rebalance.h"
#include "edl/data/shards.h"

namespace edl::data {
namespace detail {

struct Claim {
  int64_t t0 = 0;       // first step of the claim
  uint64_t offset = 0;  // shard offset at t0
  uint64_t batch = 0;   // records per step
  std::string worker;
};

std::string encode_claim(const Claim& c);
Claim decode_claim(const std::string& key, const std::string& v);

constexpr size_t kCommittedCap = 4096;  // committed batches kept for take_committed()

}  // namespace detail

struct ShardGenerator::Impl {
  using Claim = detail::Claim;
  std::shared_ptr<Store> store;
  ShardOptions o;
  uint64_t shards = 0;

  // The last committed table (save or load): what a new namespace starts from. The fixed schedule
  // of the reproducible mode needs only (epoch, step, epoch_start).
  struct Table {
    int64_t epoch = 0;
    int64_t step = 0;
    int64_t epoch_start = 0;  // fixed schedule: the step at which `epoch` began
    std::vector<uint64_t> offsets;
  } committed;

  // Live state of this worker.
  uint64_t generation = 0;
  int rank = 0, size = 1;                   // this worker's place in the generation
  std::function<std::pair<int, int>()> world;  // (rank, size) of the job's current generation, if any
  std::string worker;
  int64_t epoch = 0;
  int64_t step = 0;
  int64_t ns_step = 0;                      // step at which the claim namespace was opened
  std::vector<uint64_t> base;               // shard offsets at ns_step (this epoch)
  std::vector<uint64_t> order;              // shard order of this epoch
  size_t cursor = 0;                        // order[0..cursor) are all claimed or exhausted
  std::vector<std::optional<Claim>> claims; // cache of this namespace's claims (immutable)
  size_t known = 0;                         // shards with a cached claim or exhausted at base
  int64_t held = -1;                        // shard this worker consumes, if any
  std::vector<uint64_t> held_records;
  bool ended = false;
  std::deque<StepRecords> drawn;            // this worker's batches not yet known to be committed
  std::deque<StepRecords> done;             // committed, not yet taken by take_committed()
  size_t done_dropped = 0;                  // committed batches dropped from `done` (over the cap)

  // Reproducible mode (o.deterministic): the fixed schedule (shard_fixed.cc).
  int64_t epoch_start = 0;                  // step at which this epoch began
  std::vector<uint64_t> epoch_records;      // the epoch's records in training order
  int64_t epoch_records_of = -1;            // the epoch epoch_records belongs to

  // Straggler rebalancing (o.rebalance, shard_rebalance.cc).
  detail::Rebalancer rebalancer;
  uint64_t last_times = 0;                  // sequence number of the last step times taken
  std::function<bool(uint64_t generation, uint64_t* seq, std::vector<double>* compute_s,
                     std::vector<uint64_t>* records)> poll_times;  // the job's gathered step times, if any
  std::function<void(uint64_t records)> note_step_records;  // tells the job's runtime this step's records
  std::vector<std::pair<std::vector<double>, std::vector<uint64_t>>> pending_times;  // observe_step()

  void settle(int64_t t);
  uint64_t shard_size(uint64_t k) const;
  std::string ns_prefix() const;
  uint64_t offset_at(uint64_t k, int64_t t) const;
  std::vector<uint64_t> records_of(int64_t e, uint64_t k) const;
  std::vector<uint64_t> order_of(int64_t e) const;
  void open_namespace(std::vector<uint64_t> offsets);
  void reset_to_committed();
  void remember(uint64_t k, Claim c);
  bool try_claim(int64_t t);
  void learn_claims();  // a stop-free newcomer still catching up: the claims in order, claiming none
  bool all_exhausted(int64_t t) const;
  void refresh_claims();
  uint64_t batch() const;  // records per step of this worker now (rebalanced or o.batch_size)
  StepRecords claim_next();  // (not ended) this worker's records at the next step, claiming as needed
  std::vector<StepRecords> claim_lookahead(size_t steps) const;

  // shard_fixed.cc
  std::pair<int, int> current_world() const;
  uint64_t fixed_steps_per_epoch() const;
  StepRecords fixed_records(int64_t t);  // this worker's micro-batches of step t of the current epoch
  StepRecords fixed_next();  // (not ended)
  std::vector<StepRecords> fixed_lookahead(size_t steps);

  // shard_rebalance.cc
  void rebalance_reset();
  void rebalance_before(int64_t t);  // at next(): take new step times, maybe switch batches at step t
};

}  // namespace edl::data
