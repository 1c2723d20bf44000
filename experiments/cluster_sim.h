// cluster_sim: a discrete-event simulator of a GPU cluster shared by training jobs (and optionally a
// serving job with a time-varying demand), comparing gang scheduling with elastic scheduling.
// It reproduces Experiments 1 and 2 of the ElasticDL benchmark (docs/experiments.md).
//
// Model, in one paragraph: a job's total work is counted in "single-worker seconds". A training job
// running on k GPUs progresses at speedup(k) single-worker seconds per second (the scaling curve).
// A job admitted onto GPUs first spends `launch_s` starting (GPUs reserved, not busy). Under the
// elastic policy a running job is resized whenever its share changes: removing workers releases
// their GPUs at once and stalls the survivors for the measured recovery time, losing the measured
// number of steps; adding workers stalls the job for the measured join time. Under the gang policy
// a job waits until all its GPUs are free; losing any GPU (preemption by serving) kills it: it is
// re-queued and restarts from its last checkpoint.
//
// Utilisation is busy GPUs / all GPUs, where "busy" means a training job computing or the serving
// job holding the GPU; launching and resize stalls count as idle.
//
// Thread-safety: all functions are pure (no globals); values may be shared read-only across threads.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace edl::bench::sim {

// Speed-up of a data-parallel job at k workers relative to 1 worker. Measured points are used as
// they are; other worker counts come from a ring-allreduce cost model fitted to the measured
// points: step_time(k) / step_time(1) = 1 + r(k) with r(k) = alpha * 2(k-1)/k + beta * (k-1)
// (bandwidth term + per-hop latency term), so speedup(k) = k / (1 + r(k)).
class ScalingCurve {
 public:
  ScalingCurve() = default;
  // `measured` maps workers -> speed-up and must contain workers 1 (speed-up 1 is implied when
  // absent). Points with workers > fit_max_workers are ignored for the fit and for lookups (e.g.
  // oversubscribed measurements); fit_max_workers <= 0 keeps all. Throws InvalidArgument-like
  // std::invalid_argument on non-positive speed-ups or worker counts.
  static ScalingCurve fit(const std::map<int, double>& measured, int fit_max_workers = 0);

  double speedup(int k) const;
  double alpha() const { return alpha_; }
  double beta() const { return beta_; }
  const std::map<int, double>& points() const { return points_; }

 private:
  std::map<int, double> points_;
  double alpha_ = 0;
  double beta_ = 0;
};

// Stall (seconds) and lost steps when a running job goes from `before` to `after` workers.
// Built from measured rows: event "kill"/"stop" (shrink) and "join" (grow) keyed by ranks_after,
// falling back to "rerendezvous" rows keyed by ranks. Missing worker counts are interpolated
// linearly in the worker count (extrapolated from the two nearest points; constant with one).
class PauseModel {
 public:
  struct Point {
    double seconds = 0;
    double lost_steps = 0;
  };
  void add(const std::string& kind, int ranks_after, Point p);  // kind: "shrink", "grow", "rendezvous"
  bool empty() const { return shrink_.empty() && grow_.empty() && rendezvous_.empty(); }
  Point shrink(int before, int after) const;
  Point grow(int before, int after) const;
  const std::map<int, std::vector<Point>>& table(const std::string& kind) const;

 private:
  static Point lookup(const std::map<int, std::vector<Point>>& t, int n);
  Point lookup_or_rendezvous(const std::map<int, std::vector<Point>>& t, int n) const;
  std::map<int, std::vector<Point>> shrink_, grow_, rendezvous_;
};

// Everything about the training library and cluster that the schedule depends on.
struct Costs {
  std::string name;            // "seed" or "edl": printed in every output row as "costs"
  ScalingCurve curve;
  PauseModel pause;
  double step_s = 0.1;         // one training step at 1 worker (turns lost_steps into lost work)
  double launch_s = 53;        // admission -> first step (seed: ElasticDL master pod launch)
  double checkpoint_every_s = 60;  // gang jobs lose progress since the last checkpoint when killed
};

// Piecewise-constant GPU demand of the (highest-priority) serving job: demand is steps[i].second
// from steps[i].first until the next step. Empty = no serving job.
struct ServingDemand {
  std::vector<std::pair<double, int>> steps;
  int at(double t) const;
};

struct JobSpec {
  std::string name;
  double submit_s = 0;
  int max_workers = 1;   // GPUs requested (the gang size)
  int min_workers = 1;   // elastic lower bound
  double work = 0;       // single-worker seconds
};

enum class Policy { kGang, kElastic };
const char* policy_name(Policy p);

struct JobResult {
  std::string name;
  double submit_s = 0;
  double start_s = -1;   // first training step; -1 if never started
  double end_s = -1;     // -1 if not finished within the horizon
  int resizes = 0;
  int restarts = 0;      // gang: times killed by preemption
};

// State of the cluster from time t until the next sample.
struct Sample {
  double t = 0;
  std::vector<int> gpus;   // GPUs held per job (index as in the job list)
  std::vector<bool> busy;  // whether each job is computing
  int serving = 0;         // GPUs held by the serving job
  int busy_gpus = 0;       // serving + GPUs of computing jobs
  bool contended = false;  // unfinished submitted jobs request >= the GPUs serving leaves free
};

struct SimResult {
  std::vector<JobResult> jobs;
  std::vector<Sample> timeline;  // one sample per change, in time order
  double makespan = 0;           // last job end (or horizon)
  double utilization = 0;        // busy GPU-seconds / (gpus * makespan)
  // Mean busy share over the time in which submitted, unfinished training jobs requested at least
  // the GPUs left free by serving (the "cluster is full" periods the seed's 66.6% / ~100% describe).
  double contended_utilization = 0;
};

struct Scenario {
  std::string name;       // "1", "2"
  int gpus = 0;
  std::vector<JobSpec> jobs;
  ServingDemand serving;
  double horizon_s = 1e6; // stop here even if jobs are unfinished
};

SimResult simulate(const Scenario& s, const Costs& c, Policy p);

// The simulator's event queue, exposed for tests. Events pop in (time, class, insertion) order, so
// at equal times job completions free GPUs before phase ends, serving changes and submissions are
// handled, and the scheduler then runs once over the combined state.
struct Event {
  enum Class { kFinish = 0, kPhaseEnd = 1, kServing = 2, kSubmit = 3 };
  double t = 0;
  Class cls = kSubmit;
  int job = -1;            // job index, or serving demand for kServing
  uint64_t version = 0;    // kFinish / kPhaseEnd are stale unless equal to the job's version
  uint64_t seq = 0;        // set by the queue
};
class EventQueue {
 public:
  void push(Event e);
  Event pop();             // precondition: !empty()
  bool empty() const { return heap_.empty(); }
  const Event& top() const { return heap_.front(); }

 private:
  std::vector<Event> heap_;
  uint64_t next_seq_ = 0;
};

// The seed's published numbers as a cost set (see docs/experiments.md for the sources).
Costs seed_costs();

// Experiment 1 (6 GPUs, two 4-GPU jobs, the second submitted at 120 s) and Experiment 2 (8 GPUs,
// serving demand curve, one 6-GPU low-priority training job). Job work is calibrated with
// `calibration` (normally seed_costs()) so that the gang schedule reproduces the seed's 465 s /
// 968 s; the same work is then used with any cost set.
Scenario experiment1(const Costs& calibration);
Scenario experiment2(const Costs& calibration);
ServingDemand experiment2_serving_curve();

// Loading EDL's measured numbers from the JSON lines of scaling_bench and elastic_bench.
// Throws std::runtime_error naming the file and line on malformed input or missing rows.
struct ScalingRows {
  std::map<int, double> speedup;  // workers -> median speed-up
  double images_per_s_1 = 0;      // at 1 worker
};
ScalingRows load_scaling(const std::string& path, const std::string& model, const std::string& link);
PauseModel load_pauses(const std::string& path);

}  // namespace edl::bench::sim
