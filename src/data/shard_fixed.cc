// The reproducible mode's fixed schedule (ShardOptions::deterministic; docs/data.md, "Reproducible
// mode"). Epoch e trains the records in the order of the claim mode's shuffles (the shards in
// order_of(e), each shard's records in records_of(e, k)), global_batch = micro_batches x batch_size
// records per step: step i of the epoch trains positions [i B, (i+1) B), micro-batch j of it
// positions [i B + j b, i B + (j+1) b) (the epoch's last step may be short, its last micro-batches
// short or empty). Which records a micro-batch holds is a function of (seed, epoch, step) alone;
// the world size only decides which rank trains which micro-batches: rank r of W the contiguous run
// [r M / W, (r+1) M / W), or with rebalancing the runs of the rebalanced split. Exactly once per epoch
// holds by construction (the positions of an epoch's steps tile the epoch); the committed table is
// (epoch, step, first step of the epoch), so a rollback replays the same micro-batches.
#include <algorithm>

#include "data/shard_generator_impl.h"
#include "edl/error.h"

namespace edl::data {

std::pair<int, int> ShardGenerator::Impl::current_world() const {
  if (world) return world();
  return {rank, size};
}

uint64_t ShardGenerator::Impl::fixed_steps_per_epoch() const {
  const uint64_t global = o.batch_size * o.micro_batches;
  return (o.records + global - 1) / global;
}

StepRecords ShardGenerator::Impl::fixed_records(int64_t t) {
  if (epoch_records_of != epoch) {  // the epoch's training order: shards in order, records shuffled
    epoch_records.clear();
    for (uint64_t k : order_of(epoch)) {
      std::vector<uint64_t> r = records_of(epoch, k);
      epoch_records.insert(epoch_records.end(), r.begin(), r.end());
    }
    epoch_records_of = epoch;
  }
  const auto [r, w] = current_world();
  const uint64_t m = o.batch_size, M = o.micro_batches;
  uint64_t lo = static_cast<uint64_t>(r) * M / static_cast<uint64_t>(w);
  uint64_t hi = static_cast<uint64_t>(r + 1) * M / static_cast<uint64_t>(w);
  const std::vector<uint64_t>& split = rebalancer.split();
  if (o.rebalance && split.size() == static_cast<size_t>(w)) {
    lo = 0;
    for (int q = 0; q < r; ++q) lo += split[q];
    hi = lo + split[r];
  }
  StepRecords out;
  out.step = t;
  out.epoch = epoch;
  const uint64_t first = static_cast<uint64_t>(t - epoch_start) * m * M;  // the step's first position
  for (uint64_t j = lo; j < hi; ++j) {
    const uint64_t begin = first + j * m, end = std::min<uint64_t>(o.records, begin + m);
    if (begin >= end) break;  // the epoch's last step: the rest of its micro-batches are empty
    if (out.records.empty()) {
      out.shard = 0;
      out.offset = begin;
    }
    out.micro_batches.push_back({j, out.records.size(), end - begin});
    out.records.insert(out.records.end(), epoch_records.begin() + begin, epoch_records.begin() + end);
  }
  return out;
}

StepRecords ShardGenerator::Impl::fixed_next() {
  StepRecords r;
  r.step = step;
  r.epoch = epoch;
  if (static_cast<uint64_t>(step - epoch_start) >= fixed_steps_per_epoch()) {  // the epoch is done
    if (o.epochs > 0 && epoch + 1 >= o.epochs) {
      ended = true;
      r.end_of_data = true;
      return r;
    }
    ++epoch;
    epoch_start = step;
  }
  if (o.rebalance) rebalance_before(step);
  r = fixed_records(step);
  ++step;
  drawn.push_back(r);
  return r;
}

std::vector<StepRecords> ShardGenerator::Impl::fixed_lookahead(size_t steps) {
  std::vector<StepRecords> out;
  if (ended) return out;
  for (size_t i = 0; i < steps; ++i) {
    const int64_t t = step + static_cast<int64_t>(i);
    if (static_cast<uint64_t>(t - epoch_start) >= fixed_steps_per_epoch()) break;  // not across epochs
    StepRecords r = fixed_records(t);
    if (r.records.empty()) break;
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace edl::data
