// Convergence analysis for Experiment 3 (experiments/convergence_exp.cc): the pure parts, unit-tested in
// tests/experiments/convergence_analysis_test.cc.
//
//   * the resize plan: "--resize-at 0.5:3,2.5:2" = at 0.5 epochs of training progress go to 3
//     workers, at 2.5 to 2; workers_due() says how many workers the plan wants at a given progress;
//   * the per-step loss series of a run (the trainer's --loss-log rows), put in step order;
//   * resize detection (where the "workers" field of consecutive steps changes) and the loss spike
//     of each resize: mean loss of the W steps from the first step at the new size minus the mean
//     of the W steps before it. Both windows stop at the neighbouring resizes (and the series ends),
//     so one event's window never mixes in another's;
//   * the paired difference of two runs that train the same records at the same steps (b, c, d of
//     Experiment 3): per-step loss difference over the W steps from a resize;
//   * the spike's noise floor: the same after-minus-before statistic taken at every step of a run
//     without a resize.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace edl::bench::convergence {

struct ResizePoint {
  double at = 0;    // epoch_progress at which the plan changes the worker count
  int workers = 0;  // the new worker count
};

// Parses "P:N[,P:N...]" (P = epoch progress >= 0, strictly increasing; N >= 1 workers, each
// different from the count before it, starting from start_workers). Empty = no resizes.
// Throws std::invalid_argument naming the bad element.
std::vector<ResizePoint> parse_resize_plan(const std::string& text, int start_workers);

// The worker count the plan wants once training progress reached `progress`.
int workers_due(const std::vector<ResizePoint>& plan, int start_workers, double progress);

struct LossPoint {
  int64_t step = 0;           // optimizer step (1-based, after the step)
  double epoch_progress = 0;  // epochs done, from the world's trained records
  double loss = 0;            // the step's training loss (world mean)
  int workers = 0;            // world size at the step
};

// One --loss-log line; nullopt for a blank, partial or non-row line.
std::optional<LossPoint> parse_loss_row(const std::string& line);

// Sorts by step and keeps the LAST row of a step logged more than once (a step redone after a
// rollback supersedes the first try).
std::vector<LossPoint> normalize(std::vector<LossPoint> series);

struct ResizeEvent {
  size_t index = 0;           // first point of the series at the new size
  int from_workers = 0, to_workers = 0;
  int64_t step = 0;           // its step
  double epoch_progress = 0;  // its epoch progress
};

// Every place where consecutive points of a normalized series have different worker counts.
std::vector<ResizeEvent> detect_resizes(const std::vector<LossPoint>& series);

struct Spike {
  ResizeEvent event;
  double loss_before = 0, loss_after = 0;
  double spike = 0;                 // loss_after - loss_before
  int steps_before = 0, steps_after = 0;  // window sizes used (< window near other events / the ends)
};

// The spike of every resize of `series` (normalized) with windows of `window` steps.
// Throws std::invalid_argument for window < 1.
std::vector<Spike> spikes(const std::vector<LossPoint>& series, int window);

struct Summary {
  int n = 0;             // samples
  double mean = 0, sd = 0;  // sd: sample standard deviation (0 for n < 2)
  int below = 0;         // samples < 0
};

// Per-step loss difference a - b over the first `window` points of `a` (normalized) whose step is
// >= from_step; steps that `b` lacks are skipped. The window does not stop at a's next resize (two
// runs may resize a step apart): keep it shorter than the distance between resizes.
// Throws std::invalid_argument for window < 1.
Summary paired_difference(const std::vector<LossPoint>& a, const std::vector<LossPoint>& b, int64_t from_step,
                          int window);

// The spike statistic (mean loss of the `window` points from i minus the mean of the `window`
// points before i) at every index i of `series` (normalized) with a full window on both sides and
// from_progress <= epoch_progress <= to_progress. Throws std::invalid_argument for window < 1.
Summary spike_noise(const std::vector<LossPoint>& series, int window, double from_progress, double to_progress);

}  // namespace edl::bench::convergence
