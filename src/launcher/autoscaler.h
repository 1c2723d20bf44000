// Autoscaler: edl-run's autoscaling advice from the measured throughput scaling efficiency (the
// elastic-DL survey's AutoScaling engine; docs/observability.md "Autoscaling").
//
// R_k = aggregate throughput of the job at world size k (samples/s; batches x workers / s when the
// program did not tell its local batch), measured by rank 0 over each generation and published to
// <job>/throughput; a world size seen in several generations has R_k = their samples / their
// seconds. The throughput scaling efficiency of adding d workers at k is
//     s_{k,d} = ((R_{k+d} - R_k) / d) / (R_k / k)
// (marginal throughput per added worker over the current per-worker throughput; 1 = linear).
// Heuristic schedule, evaluated every `interval` (K) steps of a generation, at its size k:
//   1. scale in to k-d when R_{k-d} is known and s_{k-d,d} <= S (the last d workers are not worth it);
//   2. else scale out to k+d when k+d fits (max_np, and max_global_batch / local batch: the local
//      batch stays fixed until that global batch is reached) and either R_{k+d} is known with
//      s_{k,d} > S, or it is unknown and probes are allowed (--autoscale: run at k+d to measure it);
//   3. else stay at k.
// Pure: no clock, no store, no processes — samples in, a recommendation out (unit-tested).
// Thread-safety: every method takes an internal lock, so a metrics exporter may read
// recommended_world_size() / rates() from its own thread while edl-run's loop calls observe().
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace edl::launcher {

struct AutoscaleOptions {
  double threshold = 0.7;        // --scaling-threshold S, in [0, 1]
  int step = 1;                  // --scaling-step d, >= 1
  int64_t interval = 50;         // --scaling-interval K (steps), >= 1
  int min_np = 1;                // smallest world size to recommend
  int max_np = 0;                // largest (0 = unbounded)
  int64_t max_global_batch = 0;  // --max-global-batch: k x local batch may not pass it (0 = no cap)
  bool probe = false;            // --autoscale: an unmeasured k+d may be recommended to measure it
};

// One rank-0 measurement of a generation (cumulative over the generation's window so far).
struct ThroughputSample {
  uint64_t gen = 0;
  int size = 0;             // world size k of the generation
  int64_t steps = 0;        // batches since the generation's first boundary
  double seconds = 0;       // time those took
  int64_t local_batch = 0;  // samples per worker per batch (0 = unknown: counted as 1)
};

// Parses "<gen> <size> <steps> <seconds> <local batch>" (the value of <job>/throughput).
std::optional<ThroughputSample> parse_throughput(const std::string& text);

struct Recommendation {
  int world_size = 0;        // 0 = no decision yet
  int current = 0;           // the size it was decided at
  uint64_t gen = 0;          // the generation it was decided in
  double efficiency = -1;    // the s_{k,d} that decided it, or the s_{k-d,d} checked when staying (-1: none)
  std::string reason;        // for the event log
  uint64_t decision = 0;     // 1, 2, ...: how many decisions were taken up to this one
};

class Autoscaler {
 public:
  explicit Autoscaler(AutoscaleOptions o);

  // Takes a sample (a newer one of the same generation replaces the older); decides when the
  // generation has run another `interval` steps. Returns true when the recommended size changed.
  bool observe(const ThroughputSample& s);

  int recommended_world_size() const;
  Recommendation last() const;
  // R_k for every world size measured so far.
  std::map<int, double> rates() const;
  // "1:123.4,2:230.0": the R_k table for the event log.
  std::string rates_text() const;
  const AutoscaleOptions& options() const { return o_; }

  // s_{k,d} = ((R_{k+d} - R_k) / d) / (R_k / k).
  static double efficiency(double r_k, double r_kd, int k, int d);
  // The largest world size allowed: max_np, and max_global_batch / local_batch when both are set.
  int max_world_size(int64_t local_batch) const;

 private:
  std::map<int, double> rates_locked() const;
  Recommendation decide(const ThroughputSample& s) const;

  const AutoscaleOptions o_;
  mutable std::mutex mu_;
  std::map<uint64_t, ThroughputSample> by_gen_;  // latest sample of each generation
  std::map<uint64_t, int64_t> next_decision_;    // steps of the generation at which to decide next
  Recommendation rec_;
};

}  // namespace edl::launcher
