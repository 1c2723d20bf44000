// docs/benchmarks.md sections of the straggler rebalancing and reproducible-mode benches (doc_modes.h).
#include "doc_modes.h"

#include <map>
#include <string>
#include <vector>

namespace edl::docs {

void rebalance_section(std::ostream& md, const DataSet& d, Plots&) {
  const Rows& rows = d.of("rebalance_bench");
  md << "Target: with one of 3 workers at half speed, rebalancing (`edl-run --rebalance-stragglers`, docs/data.md) "
        "trains >= 0.9x the ideal throughput (the sum of the workers' speeds) and more than waiting for the slow "
        "worker (no flag) or evicting it (`--evict-stragglers`, default straggler rule; edl-run restarts the slot and "
        "the newcomer is slow again). Workload: bench/rebalance_worker under edl-run, a sleep of `record_ms` per record "
        "(twice that on the slow slot), global batch 3 x `batch`; throughput over the steps after the warm-up. The "
        "modes run in turn in each round of one run.\n";
  Rows jobs;
  for (const Json& r : rows)
    if (!(r.contains("round") && r["round"].is_string())) jobs.push_back(r);
  table(md, jobs, {"round", "mode", "samples_per_s", "ideal_samples_per_s", "ratio_to_ideal", "slow_factor",
                   "record_ms", "batch", "steps"});
  std::map<std::string, double> med;
  for (const Json& r : matching(rows, "round", "median")) med[r.value("mode", "")] = num(r, "ratio_to_ideal");
  if (!med.count("rebalance")) return;
  md << "\nMedian ratio to the ideal:";
  for (const char* m : {"wait", "evict", "rebalance"})
    if (med.count(m)) md << " " << m << " **" << fixed(med[m], 3) << "**;";
  bool above = true;
  for (const char* m : {"wait", "evict"})
    if (med.count(m)) above = above && med["rebalance"] > med[m];
  md << " rebalancing " << (med["rebalance"] >= 0.9 && above ? "meets" : "misses")
     << " the target (>= 0.9 and above both others).\n";
}

void reproducible_section(std::ostream& md, const DataSet& d, Plots&) {
  const Rows& rows = d.of("reproducible_bench");
  md << "What the reproducible mode (docs/optim.md, \"Reproducible mode\") costs next to the normal mode in the same "
        "run: ResNet20 (3x32x32, one compute thread per rank) on thread-ranks over loopback TCP, the same global batch "
        "per step; normal = one backward pass per rank and the overlapped float32 bucket allreduce (weighted mean), "
        "deterministic = `micro_batches` micro-batches spread over the ranks, each its own backward pass, and the exact "
        "sum (float64 max-allreduce of the per-tensor maxima + int64 sum-allreduce). `step_ms`: the slowest rank's "
        "step, median over the timed steps of alternating rounds; `bytes_per_step`: what one rank hands to the "
        "allreduces per step; `wrong`: ranks whose parameters differ from rank 0's at the end of a round.\n";
  table(md, having(rows, "step_ms"), {"mode", "ranks", "global_batch", "micro_batches", "step_ms", "step_ms_p10",
                                      "step_ms_p90", "bytes_per_step", "wrong"});
  for (const Json& r : matching(rows, "mode", "ratio"))
    md << "\nReproducible / normal at " << cell(r["ranks"]) << " ranks: step time x**" << fixed(num(r, "step_ms_ratio"), 3)
       << "**, bytes on the wire x**" << fixed(num(r, "bytes_ratio"), 3) << "**.\n";
}

}  // namespace edl::docs
