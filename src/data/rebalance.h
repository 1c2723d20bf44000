// Rebalancer: straggler rebalancing of the shard dispatcher (docs/data.md, "Straggler
// rebalancing"). A job of W ranks trains a global batch of B records per step; instead of B / W
// each, rank r trains b_r records, sum_r b_r = B, chosen from the measured compute time per record
// t_r so that the slowest rank's step, max_r b_r t_r, is as short as it can be.
//
// Input, after every step: every rank's compute time and records of one step (the elastic runtime's
// batch-boundary agreement gathers them: the same vectors on every member, in the same order).
// Per rank, t_r is the median of its last kWindow samples (compute / records; a step in which a rank
// had no record teaches nothing about it). Once every rank has kMinSamples samples taken since the
// last change, the min-max split is computed (greedy: one record at a time to the rank whose step
// would end first, ties to the lower rank, at least one record per rank); it replaces the current
// split when it shortens the predicted step by more than kHysteresis (measurement noise must not
// move batches back and forth). Every member computes the same split at the same step from the same
// inputs (plain arithmetic on identical values), which is what lets the dispatcher switch batches
// without a round of messages.
// Thread-safety: a plain value, used by the training thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "edl/export.h"

namespace edl::data::detail {

class EDL_API Rebalancer {  // exported for its test (tests/data/shard_modes_test.cc)
 public:
  static constexpr size_t kWindow = 8;
  static constexpr size_t kMinSamples = 4;
  static constexpr double kHysteresis = 0.05;

  // A new generation of `size` ranks splitting `global` records (>= size) per step: the even split
  // (the first global % size ranks get one more), no samples.
  void reset(int size, uint64_t global);
  // One step's compute seconds and records, indexed by rank (vectors of another size are ignored).
  void observe(const std::vector<double>& compute_s, const std::vector<uint64_t>& records);
  // Recomputes the split when enough was measured; true when it changed.
  bool update();

  const std::vector<uint64_t>& split() const { return split_; }
  // The estimated compute seconds per record of each rank (0 while unknown).
  std::vector<double> per_record_s() const;

  // The min-max split of `global` records over ranks with these seconds per record (all > 0).
  static std::vector<uint64_t> min_max_split(uint64_t global, const std::vector<double>& per_record_s);

 private:
  uint64_t global_ = 0;
  std::vector<uint64_t> split_;
  std::vector<std::vector<double>> samples_;  // per rank, the last kWindow per-record times
  std::vector<size_t> fresh_;                 // samples per rank since the last change of the split
};

}  // namespace edl::data::detail
