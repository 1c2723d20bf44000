// Straggler rebalancing in the shard dispatcher (ShardOptions::rebalance; docs/data.md, "Straggler
// rebalancing"). After every step the dispatcher takes the job's gathered compute times and records
// (the elastic runtime's batch-boundary agreement, or observe_step() on an explicit store) into its
// Rebalancer (rebalance.h). When the Rebalancer changes the split at step t, which every member
// decides at the same step from the same inputs, the claim protocol switches batches there: all
// claims of the current namespace have t0 < t and are on the store (docs/data.md: a claim is written
// before its step's allreduce), so the offsets at t are exact, and a fresh namespace opened at t from
// them lets every worker claim again with its new batch — exactly once holds as across any namespace.
// The fixed schedule of the reproducible mode needs no namespace: it splits the micro-batches by the
// new split from step t on.
#include <cstdio>

#include "common/logging.h"
#include "data/shard_generator_impl.h"

namespace edl::data {

void ShardGenerator::Impl::rebalance_reset() {
  pending_times.clear();
  if (!o.rebalance) return;
  const uint64_t global = o.deterministic ? o.micro_batches : o.batch_size * static_cast<uint64_t>(size);
  rebalancer.reset(size, global);
}

void ShardGenerator::Impl::rebalance_before(int64_t t) {
  uint64_t seq = 0;
  std::vector<double> compute_s;
  std::vector<uint64_t> records;
  if (poll_times && poll_times(generation, &seq, &compute_s, &records) && seq != last_times) {
    last_times = seq;
    rebalancer.observe(compute_s, records);
  }
  for (const auto& [c, n] : pending_times) rebalancer.observe(c, n);
  pending_times.clear();
  if (!rebalancer.update()) return;
  if (rank == 0) {
    std::string split, per_record;
    const std::vector<double> tr = rebalancer.per_record_s();
    for (size_t r = 0; r < tr.size(); ++r) {
      char ms[32];
      std::snprintf(ms, sizeof ms, "%.3g", tr[r] * 1e3);
      split += (r ? "," : "") + std::to_string(rebalancer.split()[r]);
      per_record += (r ? "," : "") + std::string(ms);
    }
    EDL_LOG(1) << "edl data: rebalanced at step " << t << ": " << (o.deterministic ? "micro-batches" : "records")
               << " per rank " << split << " (ms per record " << per_record << ")";
  }
  if (o.deterministic) return;
  refresh_claims();
  std::vector<uint64_t> offsets(shards);
  for (uint64_t k = 0; k < shards; ++k) offsets[k] = offset_at(k, t);
  open_namespace(std::move(offsets));
}

}  // namespace edl::data
