// The exactly-once record audit shared by the shard workers (bench/chaos_worker.cc,
// bench/shard_audit_worker.cc): their common data flags, the ShardGenerator they build from them,
// and the per-record training counts that the audits check (every record of every epoch trained
// exactly once in the surviving model).
//
// Thread-safety: used from the worker's training thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "edl/data.h"
#include "edl/edl.h"

namespace edl::bench {

struct AuditDefaults {
  uint64_t records = 3000;          // --records: records per epoch
  uint64_t records_per_shard = 50;  // --records-per-shard
  uint64_t batch = 8;               // --batch: records per worker per step
  int64_t epochs = 3;               // --epochs
  int step_ms = 15;                 // --step-ms: simulated compute per step
};

// Adds --records, --records-per-shard, --batch, --epochs, --seed, --step-ms and --negative-control.
inline void add_audit_flags(cxxopts::Options& opts, const AuditDefaults& d, const std::string& negative_control_help) {
  opts.add_options()("records", "records per epoch", cxxopts::value<uint64_t>()->default_value(std::to_string(d.records)))(
      "records-per-shard", "records per shard",
      cxxopts::value<uint64_t>()->default_value(std::to_string(d.records_per_shard)))(
      "batch", "records per worker per step", cxxopts::value<uint64_t>()->default_value(std::to_string(d.batch)))(
      "epochs", "epochs", cxxopts::value<int64_t>()->default_value(std::to_string(d.epochs)))(
      "seed", "shuffle seed", cxxopts::value<uint64_t>()->default_value("1"))(
      "step-ms", "simulated compute per step", cxxopts::value<int>()->default_value(std::to_string(d.step_ms)))(
      "negative-control", negative_control_help);
}

inline data::ShardOptions audit_shard_options(const cxxopts::ParseResult& args) {
  data::ShardOptions so;
  so.records = args["records"].as<uint64_t>();
  so.records_per_shard = args["records-per-shard"].as<uint64_t>();
  so.batch_size = args["batch"].as<uint64_t>();
  so.epochs = args["epochs"].as<int64_t>();
  so.seed = args["seed"].as<uint64_t>();
  return so;
}

// How often each record of each epoch was trained in the committed history: register `counts` in the
// State; each step mark() the step's records, then reduce() sums the marks of all ranks into counts.
class RecordCounts {
 public:
  RecordCounts(uint64_t records, int64_t epochs)
      : records_(records), counts(records * epochs, 0), marks_(records * epochs, 0) {}
  // Marks the records this rank trains at this step; returns the sum of their indices.
  double mark(const data::StepRecords& s) {
    std::fill(marks_.begin(), marks_.end(), 0);
    double key = 0;
    for (uint64_t r : s.records) {
      marks_[s.epoch * records_ + r] += 1;
      key += static_cast<double>(r);
    }
    return key;
  }
  // Collective: adds every rank's marks of this step to counts.
  void reduce() {
    edl::allreduce(marks_.data(), marks_.size(), DataType::kInt32, ReduceOp::kSum, "marks");
    for (size_t i = 0; i < counts.size(); ++i) counts[i] += marks_[i];
  }

 private:
  uint64_t records_;

 public:
  std::vector<int32_t> counts;  // registered in the State

 private:
  std::vector<int32_t> marks_;
};

}  // namespace edl::bench
