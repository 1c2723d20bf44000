// DistributedOptimizer's reproducible mode (DistributedOptimizerOptions::deterministic, docs/optim.md
// "Reproducible mode"): every backward pass is one micro-batch whose gradient is kept aside; step()
// agrees on per-tensor maxima (one max-allreduce), sums the micro-batches on a fixed-point grid (one
// int64 sum-allreduce, exact in any order: optim/exact_sum.h) and applies the update with the mean.
// Registered buffers (batch-norm statistics) start every micro-batch from their value at the start
// of the step and end the step at the exact mean of the micro-batches' results. The result depends
// on the micro-batches, never on how many ranks trained them or in which order.
#include <climits>

#include "optim/distributed_optimizer_impl.h"

namespace edl {

// The flat layout of a micro-batch: the buckets one after another, then the registered buffers.
void DistributedOptimizer::Impl::exact_layout() {
  std::vector<size_t> bucket_base(buckets.size(), 0);
  size_t flat = 0;
  for (size_t b = 0; b < buckets.size(); ++b) {
    bucket_base[b] = flat;
    flat += buckets[b].count;
  }
  std::vector<std::pair<size_t, size_t>> tensors;
  for (const auto& p : params) tensors.emplace_back(bucket_base[p.bucket] + p.offset, p.count);
  for (auto& b : state_buffers) {
    b.offset = flat;
    tensors.emplace_back(flat, b.count);
    flat += b.count;
  }
  exact.set_layout(std::move(tensors), flat);
}

void DistributedOptimizer::Impl::begin_micro_batch(uint64_t samples) {
  EDL_CHECK(opt.deterministic, InvalidArgument,
            "DistributedOptimizer::begin_micro_batch needs DistributedOptimizerOptions::deterministic");
  begin_step();
  if (reported > 0 || micro_samples) end_pass();
  for (auto& b : state_buffers)  // every micro-batch starts from the step's buffers
    std::memcpy(b.data, b.at_step_start.data(), b.count * sizeof(float));
  micro_samples = samples;
}

// The end of a micro-batch's backward pass: its gradient (and the buffers' values) kept aside.
void DistributedOptimizer::Impl::keep_micro_batch() {
  EDL_CHECK(micro_samples.has_value(), InvalidArgument,
            "DistributedOptimizer (deterministic): a backward pass without begin_micro_batch(samples) before it");
  const uint64_t records = *micro_samples;
  micro_samples.reset();
  if (records == 0) return;  // an empty micro-batch adds nothing
  float* slot = exact.add(records);
  size_t flat = 0;
  for (const auto& b : buckets) {
    std::memcpy(slot + flat, b.buf.data(), b.count * sizeof(float));
    flat += b.count;
  }
  for (const auto& b : state_buffers) std::memcpy(slot + b.offset, b.data, b.count * sizeof(float));
}

// One blocking collective of the step through the reducer (none in a world of one).
void DistributedOptimizer::Impl::exact_collective(void* data, size_t count, DataType type, ReduceOp op,
                                                  const char* tag) {
  if (!reducer) return;
  ReduceJob job;
  job.other = data;
  job.count = count;
  job.type = type;
  job.op = op;
  job.name = name_prefix + tag;
  reducer->launch(&job);
  reducer->wait(&job);
  stats.comm_s += job.busy_s;
  stats.bytes += count * (type == DataType::kFloat64 || type == DataType::kInt64 ? 8 : 4);
  if (job.error) std::rethrow_exception(job.error);
}

// The maxima of every tensor over all ranks' micro-batches, and the learning-rate check (the last two
// values: lr and -lr, so that the max gives both the largest and the smallest over the ranks).
void DistributedOptimizer::Impl::agree_maxima() {
  const size_t n = exact.tensors();
  maxima.assign(n + 2, 0.0);
  exact.local_max(maxima.data());
  maxima[n] = step_lr;
  maxima[n + 1] = -step_lr;
  exact_collective(maxima.data(), maxima.size(), DataType::kFloat64, ReduceOp::kMax, "exact.max");
  EDL_CHECK(maxima[n] == step_lr && -maxima[n + 1] == step_lr, MismatchError,
            "DistributedOptimizer: ranks disagree on the learning rate of step " + std::to_string(rescaler.step()) +
                ": this rank (" + std::to_string(comm ? comm->rank() : 0) + ") uses " + std::to_string(step_lr) +
                ", the ranks use " + std::to_string(-maxima[n + 1]) + " .. " + std::to_string(maxima[n]) +
                " (different scaling policies or rescaler states?)");
}

// The step's sum on the grid, with its records, micro-batches and ranks as the last three values.
uint64_t DistributedOptimizer::Impl::exact_sum() {
  const size_t n = exact.elements();
  sums.assign(n + 3, 0);
  exact.quantize(maxima.data(), sums.data());
  sums[n] = static_cast<int64_t>(exact.samples());
  sums[n + 1] = static_cast<int64_t>(exact.count());
  sums[n + 2] = 1;
  exact_collective(sums.data(), sums.size(), DataType::kInt64, ReduceOp::kSum, "exact.sum");
  EDL_CHECK(sums[n + 2] == world_size, MismatchError,
            "DistributedOptimizer (deterministic): " + std::to_string(sums[n + 2]) + " of " +
                std::to_string(world_size) + " ranks took part in the exact sum");
  EDL_CHECK(static_cast<uint64_t>(sums[n + 1]) <= optim::detail::kMaxMicroBatches, InvalidArgument,
            "DistributedOptimizer (deterministic): " + std::to_string(sums[n + 1]) + " micro-batches in one step (at most " +
                std::to_string(optim::detail::kMaxMicroBatches) + ")");
  return static_cast<uint64_t>(sums[n]);
}

void DistributedOptimizer::Impl::exact_step() {
  const double t_entry = now_s();
  begin_step();
  if (reported > 0 || micro_samples) {
    backward_end = now_s();
    end_pass();
  }
  const double t_wait = now_s();
  uint64_t records = 0;
  try {
    agree_maxima();
    records = exact_sum();
  } catch (...) {
    in_step = false;
    restore_buffers();
    throw;
  }
  in_step = false;
  stats.wait_s = now_s() - t_wait;
  const double t_update = now_s();
  if (records > 0) {  // the mean into the buckets (the update reads them) and into the buffers
    exact.mean(sums.data(), maxima.data(), records, exact_mean.data());
    size_t flat = 0;
    for (auto& b : buckets) {
      std::memcpy(b.buf.data(), exact_mean.data() + flat, b.count * sizeof(float));
      flat += b.count;
    }
    for (auto& b : state_buffers) std::memcpy(b.data, exact_mean.data() + b.offset, b.count * sizeof(float));
    apply_update();
  } else {
    restore_buffers();  // no record anywhere: nothing changes
  }
  stats.update_s = now_s() - t_update;
  stats.samples = records;
  if (timeline::on()) trace_step(t_entry, t_wait, t_update, t_update + stats.update_s);
  rescaler.advance();
}

void DistributedOptimizer::Impl::restore_buffers() {
  for (auto& b : state_buffers)
    if (b.at_step_start.size() == b.count) std::memcpy(b.data, b.at_step_start.data(), b.count * sizeof(float));
}

}  // namespace edl
