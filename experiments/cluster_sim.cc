// The discrete-event engine of the cluster simulator: job state machine, the two scheduling
// policies, serving preemption and the utilisation timeline (the model is in cluster_sim.h).
#include "cluster_sim.h"

#include <algorithm>
#include <cmath>
#include <queue>
#include <stdexcept>

namespace edl::bench::sim {

namespace {

bool later(const Event& a, const Event& b) {
  if (a.t != b.t) return a.t > b.t;
  if (a.cls != b.cls) return a.cls > b.cls;
  return a.seq > b.seq;
}

enum class Phase { kUnsubmitted, kPending, kLaunching, kRunning, kPaused, kDone };

struct JobState {
  Phase phase = Phase::kUnsubmitted;
  int gpus = 0;
  double progress = 0;       // single-worker seconds done
  double ckpt_progress = 0;  // progress at the last checkpoint
  double since_ckpt = 0;     // computing seconds since the last checkpoint
  uint64_t version = 0;      // bumped whenever the job's pending own event becomes stale
};

class Simulator {
 public:
  Simulator(const Scenario& s, const Costs& c, Policy p) : s_(s), c_(c), p_(p), jobs_(s.jobs.size()) {
    for (size_t i = 0; i < s.jobs.size(); ++i) {
      const JobSpec& j = s.jobs[i];
      if (j.max_workers < 1 || j.min_workers < 1 || j.min_workers > j.max_workers || !(j.work > 0)) {
        throw std::invalid_argument("job '" + j.name + "': need 1 <= min_workers <= max_workers and work > 0");
      }
      if (j.max_workers > s.gpus) {
        throw std::invalid_argument("job '" + j.name + "' asks for " + std::to_string(j.max_workers) +
                                    " GPUs but the cluster has " + std::to_string(s.gpus));
      }
      result_.jobs.push_back({j.name, j.submit_s});
      q_.push({j.submit_s, Event::kSubmit, static_cast<int>(i)});
    }
    for (const auto& [t, d] : s.serving.steps) {
      if (d < 0 || d > s.gpus) throw std::invalid_argument("serving demand out of range at t=" + std::to_string(t));
      q_.push({t, Event::kServing, d});
    }
  }

  SimResult run() {
    while (!q_.empty() && !all_done()) {
      double t = q_.top().t;
      if (t > s_.horizon_s) break;
      advance(t);
      while (!q_.empty() && q_.top().t == t) handle(q_.pop());
      schedule();
      record();
    }
    finish();
    return result_;
  }

 private:
  bool all_done() const {
    return std::all_of(jobs_.begin(), jobs_.end(), [](const JobState& j) { return j.phase == Phase::kDone; });
  }

  double rate(size_t i) const { return c_.curve.speedup(jobs_[i].gpus); }

  // Moves every computing job's progress (and checkpoint clock) forward to time t.
  void advance(double t) {
    double dt = t - now_;
    for (size_t i = 0; i < jobs_.size() && dt > 0; ++i) {
      JobState& j = jobs_[i];
      if (j.phase != Phase::kRunning) continue;
      double r = rate(i);
      double ce = c_.checkpoint_every_s;
      double total = j.since_ckpt + dt;
      if (ce > 0 && total >= ce) {
        double m = std::floor(total / ce);
        j.ckpt_progress = j.progress + r * (m * ce - j.since_ckpt);
        j.since_ckpt = total - m * ce;
      } else {
        j.since_ckpt = total;
      }
      j.progress = std::min(s_.jobs[i].work, j.progress + r * dt);
    }
    now_ = t;
  }

  void handle(const Event& e) {
    switch (e.cls) {
      case Event::kSubmit:
        jobs_[e.job].phase = Phase::kPending;
        break;
      case Event::kServing:
        serving_demand_ = e.job;
        break;
      case Event::kFinish: {
        JobState& j = jobs_[e.job];
        if (e.version != j.version || j.phase != Phase::kRunning) return;
        j.progress = s_.jobs[e.job].work;
        j.phase = Phase::kDone;
        j.gpus = 0;
        ++j.version;
        result_.jobs[e.job].end_s = now_;
        break;
      }
      case Event::kPhaseEnd: {
        JobState& j = jobs_[e.job];
        if (e.version != j.version) return;
        if (j.phase == Phase::kLaunching && result_.jobs[e.job].start_s < 0) result_.jobs[e.job].start_s = now_;
        if (j.phase == Phase::kLaunching || j.phase == Phase::kPaused) start_running(e.job);
        break;
      }
    }
  }

  void start_running(size_t i) {
    JobState& j = jobs_[i];
    j.phase = Phase::kRunning;
    ++j.version;
    double remaining = std::max(0.0, s_.jobs[i].work - j.progress);
    q_.push({now_ + remaining / rate(i), Event::kFinish, static_cast<int>(i), j.version});
  }

  void enter(size_t i, Phase phase, double seconds) {
    JobState& j = jobs_[i];
    j.phase = phase;
    ++j.version;
    q_.push({now_ + seconds, Event::kPhaseEnd, static_cast<int>(i), j.version});
  }

  int free_gpus() const {
    int used = serving_;
    for (const JobState& j : jobs_) used += j.gpus;
    return s_.gpus - used;
  }

  // A job that loses all its workers (gang: any worker) goes back to the queue at its last checkpoint.
  void requeue(size_t i) {
    JobState& j = jobs_[i];
    j.gpus = 0;
    j.progress = j.ckpt_progress;
    j.since_ckpt = 0;
    j.phase = Phase::kPending;
    ++j.version;
    ++result_.jobs[i].restarts;
  }

  // Resizes a running/paused elastic job to `k` workers (k >= min_workers), paying the pause.
  void resize(size_t i, int k) {
    JobState& j = jobs_[i];
    int before = j.gpus;
    if (j.phase == Phase::kLaunching) {  // not training yet: the launch just starts more or fewer pods
      j.gpus = k;
      return;
    }
    PauseModel::Point p = k < before ? c_.pause.shrink(before, k) : c_.pause.grow(before, k);
    j.progress = std::max(0.0, j.progress - p.lost_steps * before * c_.step_s);
    j.ckpt_progress = std::min(j.ckpt_progress, j.progress);
    j.gpus = k;
    ++result_.jobs[i].resizes;
    enter(i, Phase::kPaused, p.seconds);
  }

  bool holds_gpus(const JobState& j) const {
    return j.phase == Phase::kLaunching || j.phase == Phase::kRunning || j.phase == Phase::kPaused;
  }

  // Serving has the highest priority: it takes free GPUs first, then preempts the most recently
  // submitted training jobs.
  void schedule_serving() {
    if (serving_demand_ <= serving_) {
      serving_ = serving_demand_;
      return;
    }
    int need = serving_demand_ - serving_ - std::max(0, free_gpus());
    for (size_t r = jobs_.size(); r-- > 0 && need > 0;) {
      JobState& j = jobs_[r];
      if (!holds_gpus(j) || j.gpus == 0) continue;
      int keep = j.gpus - std::min(need, j.gpus);
      if (p_ == Policy::kGang || keep < s_.jobs[r].min_workers) keep = 0;
      need -= j.gpus - keep;
      if (keep == 0) {
        requeue(r);
      } else {
        resize(r, keep);
      }
    }
    serving_ = serving_demand_;
  }

  void schedule_gang() {
    for (size_t i = 0; i < jobs_.size(); ++i) {  // strict FIFO: no job overtakes a waiting one
      if (jobs_[i].phase != Phase::kPending) continue;
      int want = s_.jobs[i].max_workers;
      if (want > free_gpus()) return;
      jobs_[i].gpus = want;
      enter(i, Phase::kLaunching, c_.launch_s);
    }
  }

  void schedule_elastic() {
    for (size_t i = 0; i < jobs_.size(); ++i) {  // FIFO: earlier jobs fill up first
      JobState& j = jobs_[i];
      int free = free_gpus();
      const JobSpec& spec = s_.jobs[i];
      if (j.phase == Phase::kPending) {
        if (free < spec.min_workers) continue;
        j.gpus = std::min(spec.max_workers, free);
        enter(i, Phase::kLaunching, c_.launch_s);
      } else if (holds_gpus(j) && j.gpus < spec.max_workers && free > 0) {
        resize(i, std::min(spec.max_workers, j.gpus + free));
      }
    }
  }

  void schedule() {
    schedule_serving();
    if (p_ == Policy::kGang) {
      schedule_gang();
    } else {
      schedule_elastic();
    }
    if (free_gpus() < 0) throw std::logic_error("cluster_sim: more GPUs allocated than exist");
  }

  void record() {
    Sample s;
    s.t = now_;
    s.serving = serving_;
    s.busy_gpus = serving_;
    int requested = 0;
    for (size_t i = 0; i < jobs_.size(); ++i) {
      const JobState& j = jobs_[i];
      bool busy = j.phase == Phase::kRunning;
      s.gpus.push_back(j.gpus);
      s.busy.push_back(busy);
      if (busy) s.busy_gpus += j.gpus;
      if (j.phase != Phase::kUnsubmitted && j.phase != Phase::kDone) requested += s_.jobs[i].max_workers;
    }
    s.contended = requested > 0 && requested >= s_.gpus - serving_;
    auto& tl = result_.timeline;
    if (!tl.empty() && tl.back().gpus == s.gpus && tl.back().busy == s.busy && tl.back().serving == s.serving &&
        tl.back().contended == s.contended) {
      return;
    }
    if (!tl.empty() && tl.back().t == s.t) tl.pop_back();
    tl.push_back(std::move(s));
  }

  void finish() {
    double end = 0;
    for (const JobResult& r : result_.jobs) end = std::max(end, r.end_s < 0 ? s_.horizon_s : r.end_s);
    result_.makespan = end;
    double busy = 0, cont_busy = 0, cont_time = 0;
    const auto& tl = result_.timeline;
    for (size_t i = 0; i < tl.size(); ++i) {
      double t1 = i + 1 < tl.size() ? std::min(tl[i + 1].t, end) : end;
      double dt = std::max(0.0, t1 - tl[i].t);
      busy += dt * tl[i].busy_gpus;
      if (tl[i].contended) {
        cont_busy += dt * tl[i].busy_gpus;
        cont_time += dt;
      }
    }
    result_.utilization = end > 0 ? busy / (end * s_.gpus) : 0;
    result_.contended_utilization = cont_time > 0 ? cont_busy / (cont_time * s_.gpus) : 0;
  }

  const Scenario& s_;
  const Costs& c_;
  Policy p_;
  std::vector<JobState> jobs_;
  EventQueue q_;
  SimResult result_;
  double now_ = 0;
  int serving_ = 0;
  int serving_demand_ = 0;
};

}  // namespace

void EventQueue::push(Event e) {
  e.seq = next_seq_++;
  heap_.push_back(e);
  std::push_heap(heap_.begin(), heap_.end(), later);
}

Event EventQueue::pop() {
  std::pop_heap(heap_.begin(), heap_.end(), later);
  Event e = heap_.back();
  heap_.pop_back();
  return e;
}

SimResult simulate(const Scenario& s, const Costs& c, Policy p) {
  if (s.gpus < 1) throw std::invalid_argument("scenario '" + s.name + "' has no GPUs");
  return Simulator(s, c, p).run();
}

}  // namespace edl::bench::sim
