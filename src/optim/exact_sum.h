// ExactSum: the order- and split-independent gradient sum of the reproducible mode (docs/optim.md,
// "Reproducible mode"). A step's gradient is the sum over the step's fixed micro-batches, each of
// which some rank trained. A float sum depends on the order of the additions and so on how the
// micro-batches were split over the ranks; an integer sum does not. Per step:
//   1. per tensor, each rank takes the largest |samples_j * g_j| over its micro-batches j, and a
//      max-allreduce gives the step's maximum M over all of them (max is exactly associative);
//   2. each micro-batch's contribution c_j = samples_j * g_j (exact in double: a float times an
//      integer below 2^29) goes on the fixed-point grid 2^(E - kExactBits), E the binary exponent of
//      M (M < 2^E): an int64 of magnitude <= 2^kExactBits, a function of c_j and M alone;
//   3. the int64 values are summed locally and by a sum-allreduce: exact in any order and split
//      (up to kMaxMicroBatches micro-batches per step keep every partial sum below 2^62);
//   4. the mean gradient is (double) sum * 2^(E - kExactBits) / N, N the step's records.
// Rounding to the grid loses less than 2^-kExactBits of the tensor's largest contribution per
// micro-batch (float32 itself keeps 2^-24 of each value). A tensor whose maximum is not finite (a
// NaN or an infinity in some gradient) gets a NaN mean, as a float sum would.
// Thread-safety: a plain value, used by the training thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "edl/export.h"

namespace edl::optim::detail {

constexpr int kExactBits = 42;
constexpr uint64_t kMaxMicroBatches = uint64_t{1} << 20;

class EDL_API ExactSum {  // exported for its test (tests/optim/reproducible_test.cc)
 public:
  // The tensors as (offset, elements) segments of the flat gradient of `elements` floats.
  void set_layout(std::vector<std::pair<size_t, size_t>> tensors, size_t elements);
  size_t elements() const { return elements_; }
  size_t tensors() const { return tensors_.size(); }

  // A new step: no micro-batch yet (the storage is kept for reuse).
  void clear();
  // Room for one more micro-batch gradient of `samples` records: elements() floats to fill.
  float* add(uint64_t samples);
  size_t count() const { return count_; }
  uint64_t samples() const { return samples_; }

  // Per tensor (tensors() doubles): the largest |samples * g| over this rank's micro-batches, 0
  // without any, +infinity when one is not finite.
  void local_max(double* out) const;
  // This rank's micro-batches on the grid of the agreed maxima, summed into acc (elements() int64s,
  // overwritten).
  void quantize(const double* global_max, int64_t* acc) const;
  // The mean gradient of the step from the summed grid values and the step's records (> 0).
  void mean(const int64_t* sum, const double* global_max, uint64_t total_samples, float* out) const;

 private:
  std::vector<std::pair<size_t, size_t>> tensors_;
  size_t elements_ = 0;
  std::vector<std::vector<float>> grads_;  // grads_[j]: micro-batch j's gradient (reused across steps)
  std::vector<uint64_t> counts_;           // its records
  size_t count_ = 0;
  uint64_t samples_ = 0;
};

}  // namespace edl::optim::detail
