// Straggler detection (docs/observability.md, "Stragglers"). At every batch boundary each member
// contributes the compute part of its last step (the time between two boundaries minus the time
// its training thread was blocked waiting for collectives); the batch-boundary agreement gathers
// the vector, so every member feeds the SAME vector to its own StragglerDetector at the same
// boundary and reaches the same verdict — eviction is then a deterministic membership change.
//
// Rule: rank r is slow at a boundary when its step time t_r > factor x median and t_r - median >
// min_gap (the median over the ranks whose time is known, for an even count the lower of the two
// middle values, so that in a job of two the faster rank is the reference). A rank slow at
// `steps` consecutive boundaries is a straggler: reported once when its run reaches `steps`
// (again only after it was fast in between), and with `evict` it is removed at the next batch
// boundary as long as the job keeps at least its minimum size (slowest first).
// Thread-safety: a plain value; one thread (the training thread) uses it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "edl/export.h"

namespace edl::elastic {

struct StragglerOptions {
  double factor = 1.5;     // EDL_STRAGGLER_FACTOR (edl-run --straggler-factor): > 1
  int steps = 20;          // EDL_STRAGGLER_STEPS (--straggler-steps): consecutive slow boundaries, >= 1
  bool evict = false;      // EDL_EVICT_STRAGGLERS=1 (--evict-stragglers): remove persistent stragglers
  double min_gap_s = 0.001;  // a rank within 1 ms of the median is never slow (timer noise of tiny steps)
};

struct StragglerReport {
  int rank = -1;
  int64_t step = 0;         // the boundary at which the run reached `steps`
  double step_s = 0;        // the rank's compute time at that boundary
  double median_s = 0;      // the median of that boundary
  int consecutive = 0;      // slow boundaries in a row
};

class EDL_API StragglerDetector {
 public:
  explicit StragglerDetector(StragglerOptions o = {});

  // Forgets every run (a new generation: ranks and sizes change).
  void reset(int size);
  // One boundary: compute time of every rank in seconds (<= 0: unknown, e.g. the first boundary of
  // a generation; such a rank is neither judged nor part of the median). Returns the ranks whose
  // slow run reached `steps` at this boundary.
  std::vector<StragglerReport> observe(int64_t step, const std::vector<double>& step_s);
  // Ranks slow for at least `steps` consecutive boundaries, slowest (latest time) first.
  std::vector<int> persistent() const;
  // With `evict`: the persistent stragglers to remove now, slowest first, keeping size >= min_np.
  std::vector<int> to_evict(int min_np) const;
  int consecutive(int rank) const { return rank >= 0 && rank < static_cast<int>(run_.size()) ? run_[rank] : 0; }
  const StragglerOptions& options() const { return o_; }

  // The median as the rule uses it (lower middle value for an even count); 0 for an empty list.
  static double median(std::vector<double> v);

 private:
  StragglerOptions o_;
  std::vector<int> run_;       // consecutive slow boundaries per rank
  std::vector<double> last_;   // latest time per rank
};

// What a worker knows about stragglers (kept for a metrics exporter; Worker::straggler_stats()).
struct StragglerStats {
  uint64_t reports = 0;                  // straggler reports in this worker's job view
  uint64_t evictions = 0;                // evictions decided
  std::vector<double> step_s;            // the latest gathered compute times, by rank
  double median_s = 0;                   // their median
  std::vector<StragglerReport> last;     // the reports of the latest boundary that had any
};

// "gen=G step=S rank=R worker=W step_ms=X median_ms=Y factor=F steps=N action=A": the value of
// <job>/straggler/<worker> and of the event-log line edl-run prints for it.
EDL_API std::string describe_straggler(const StragglerReport& r, uint64_t gen, const std::string& worker,
                               const StragglerOptions& o, const char* action);

}  // namespace edl::elastic
