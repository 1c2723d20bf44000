// edl::data::ShardLoader — the data source of an elastic training loop: each step, the records the
// shard dispatcher assigns to this worker, assembled into a Batch (normalised, augmented with
// salt = epoch) by a prefetch thread that works ahead on the rest of the shard this worker holds.
//
//   edl::data::ShardLoader loader(dataset, shards, edl::data::cifar10_normalization(true));
//   for (;;) {
//     edl::data::StepRecords s = loader.next(&batch);   // calls shards.next() exactly once
//     if (s.end_of_data) break;
//     train(batch);                                     // batch.size may be 0 at an epoch's tail
//     edl::notify_batch_end();
//   }
//
// Prefetched batches are keyed by (epoch, shard, offset, size); after a rollback or a new generation
// the dispatcher may assign different records, and anything prefetched that does not match is
// dropped — so the loader never hands out records the dispatcher did not assign for this step.
//
// Thread-safety: used by the training thread only (like the ShardGenerator it wraps, which must
// outlive it).
#pragma once

#include <cstddef>
#include <deque>
#include <memory>

#include "edl/data/batch.h"
#include "edl/data/dataset.h"
#include "edl/data/shards.h"
#include "edl/export.h"

namespace edl::data {

class EDL_API ShardLoader {
 public:
  // depth: batches assembled ahead (>= 1).
  ShardLoader(std::shared_ptr<const Dataset> dataset, ShardGenerator& shards, BatchOptions options, size_t depth = 4);
  ~ShardLoader();
  ShardLoader(const ShardLoader&) = delete;
  ShardLoader& operator=(const ShardLoader&) = delete;

  // One training step: shards.next(), and *batch filled with its records (size 0 for an empty step
  // or at the end of data). The records must be within the dataset (InvalidArgument otherwise).
  StepRecords next(Batch* batch);
  // Batches assembled ahead that were dropped because the dispatcher changed its plan.
  size_t dropped() const { return dropped_; }

 private:
  struct Key {
    int64_t epoch;
    int64_t shard;
    uint64_t offset;
    size_t size;
    bool operator==(const Key& o) const {
      return epoch == o.epoch && shard == o.shard && offset == o.offset && size == o.size;
    }
  };
  static Key key_of(const StepRecords& s) { return {s.epoch, s.shard, s.offset, s.records.size()}; }
  void refill();

  std::shared_ptr<const Dataset> dataset_;
  ShardGenerator& shards_;
  size_t depth_;
  std::unique_ptr<Prefetcher> prefetcher_;
  std::deque<Key> queued_;  // keys of the batches submitted to the prefetcher, in order
  size_t dropped_ = 0;
};

}  // namespace edl::data
