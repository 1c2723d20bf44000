// StepLog: the --loss-log rows of the training binaries, one JSON object per optimizer step,
// appended by whoever is rank 0 of the current generation:
//   {"run","step","epoch_progress","loss","workers","lr","momentum_gamma"}
// epoch_progress = epochs done as a float, from the records the whole world has trained so far
// (comparable across world sizes); loss = the world's mean training loss of the step (from the
// per-step statistics allreduce the trainer does anyway: no extra collective); momentum_gamma = the
// momentum-compensation factor gamma_t applied at the step (1 = none; survey eq. 6).
// A step redone after a rollback is logged again (same "step"): readers keep the last row per step.
//
// Thread-safety: used by the training thread only.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace edl::trainer {

struct StepRow {
  int64_t step = 0;
  double epoch_progress = 0;
  double loss = 0;
  int workers = 0;
  double lr = 0;
  double momentum_gamma = 1;
};

class StepLog {
 public:
  // path empty = disabled (write() does nothing).
  StepLog(std::string path, std::string run_name);
  // Appends `row` when is_rank0 (the file is opened on the first such call and flushed per row, so
  // a reader polling the file sees whole lines).
  void write(bool is_rank0, const StepRow& row);

 private:
  std::string path_, run_;
  std::ofstream out_;
};

}  // namespace edl::trainer
