// Progress: the per-epoch progress line of the training binaries.
//   epoch 2/5 [##############------] 42000/60000 records  812 img/s  loss 0.3121  acc 88.71%
// Lines are printed at every tenth of an epoch and at its end (with the test accuracy).
// Thread-safety: used by the training thread only.
#pragma once

#include <chrono>
#include <cstdint>

namespace edl::trainer {

class Progress {
 public:
  Progress(int epochs, uint64_t records_per_epoch);
  // After each step: world totals of this epoch so far. Prints when a tenth of the epoch is crossed.
  void step(bool talk, int64_t epoch, double records, double loss, double acc);
  // At the end of an epoch; test_acc < 0 = not evaluated. Returns the epoch's images/s.
  double end_epoch(bool talk, int64_t epoch, double records, double loss, double acc, double test_acc, int workers);

 private:
  void print(int64_t epoch, double records, double loss, double acc, double ips, double test_acc, int workers,
             bool final) const;
  int epochs_;
  uint64_t records_;
  int64_t epoch_ = -1;
  int tenth_ = 0;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace edl::trainer
