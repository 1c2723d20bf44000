// The two cluster experiments of the ElasticDL benchmark (seed 000/001), with job sizes calibrated
// on the seed's published gang schedule (docs/experiments.md).
#include "cluster_sim.h"

namespace edl::bench::sim {

namespace {

// Experiment 1 as published: 6 GPUs, two jobs of 4 GPUs, the second submitted at 120 s; under gang
// scheduling the first ends at 465 s and the second starts 53 s later (master pod launch) and ends
// at 968 s.
constexpr int kExp1Gpus = 6;
constexpr int kExp1Workers = 4;
constexpr double kExp1Submit2 = 120;
constexpr double kExp1GangEnd1 = 465;
constexpr double kExp1GangEnd2 = 968;

}  // namespace

Scenario experiment1(const Costs& cal) {
  // Under gang scheduling each job runs alone on 4 GPUs after its launch, so its work is its
  // published run time times the calibration curve's speed-up at 4 workers.
  double rate4 = cal.curve.speedup(kExp1Workers);
  double run1 = kExp1GangEnd1 - cal.launch_s;                   // 0 -> launch -> 465
  double run2 = kExp1GangEnd2 - kExp1GangEnd1 - cal.launch_s;   // 465 -> launch -> 968
  Scenario s;
  s.name = "1";
  s.gpus = kExp1Gpus;
  s.jobs.push_back({"job1", 0, kExp1Workers, 1, run1 * rate4});
  s.jobs.push_back({"job2", kExp1Submit2, kExp1Workers, 1, run2 * rate4});
  return s;
}

ServingDemand experiment2_serving_curve() {
  // A diurnal-like traffic profile compressed to a 1000 s "day", repeated: serving starts on 2 GPUs,
  // climbs one GPU at a time to 6 by 170 s (the seed: "in the first 170s, the traffic increases"),
  // holds the peak, falls back to 2 by 420 s, then a smaller evening peak of 4 GPUs (640-880 s).
  static const std::vector<std::pair<double, int>> day = {
      {0, 2}, {30, 3}, {70, 4}, {120, 5}, {170, 6}, {300, 5}, {340, 4},
      {380, 3}, {420, 2}, {640, 3}, {700, 4}, {820, 3}, {880, 2}};
  ServingDemand d;
  for (int k = 0; k < 20; ++k) {
    for (const auto& [t, g] : day) d.steps.push_back({k * 1000.0 + t, g});
  }
  return d;
}

Scenario experiment2(const Costs& cal) {
  // One low-priority training job asking for 6 of the 8 GPUs, with twice the work of Experiment 1's
  // second job (900 s on 4 GPUs at the calibration speed), so that it lives through a whole "day".
  Scenario s;
  s.name = "2";
  s.gpus = 8;
  double run4 = 2 * (kExp1GangEnd2 - kExp1GangEnd1 - cal.launch_s);
  s.jobs.push_back({"training", 0, 6, 1, run4 * cal.curve.speedup(kExp1Workers)});
  s.serving = experiment2_serving_curve();
  s.horizon_s = 20000;
  return s;
}

}  // namespace edl::bench::sim
