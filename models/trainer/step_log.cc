#include "step_log.h"

#include <cstdio>
#include <utility>

#include <edl/error.h>

namespace edl::trainer {

StepLog::StepLog(std::string path, std::string run_name) : path_(std::move(path)), run_(std::move(run_name)) {}

void StepLog::write(bool is_rank0, const StepRow& r) {
  if (path_.empty() || !is_rank0) return;
  if (!out_.is_open()) {
    out_.open(path_, std::ios::app);
    if (!out_) throw InvalidArgument("--loss-log: cannot open '" + path_ + "' for appending");
  }
  char row[384];
  std::snprintf(row, sizeof(row),
                "{\"run\":\"%s\",\"step\":%lld,\"epoch_progress\":%.6f,\"loss\":%.6f,\"workers\":%d,\"lr\":%.6g,"
                "\"momentum_gamma\":%.6g}",
                run_.c_str(), static_cast<long long>(r.step), r.epoch_progress, r.loss, r.workers, r.lr,
                r.momentum_gamma);
  out_ << row << '\n';
  out_.flush();
}

}  // namespace edl::trainer
