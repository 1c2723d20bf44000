#include "chaos_trial.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "common/bench_util.h"
#include "testing/process.h"

namespace edl::bench::chaos {

std::string Fault::label() const {
  std::string s = kind;
  if (!phase.empty()) s += ":" + phase;
  if (rank >= 0) s += ":r" + std::to_string(rank);
  s += "@" + std::to_string(at_step);
  if (!injected) s += "(not reached)";
  if (!note.empty()) s += "(" + note + ")";
  return s;
}

namespace {

namespace fs = std::filesystem;

double est_steps(const TrialConfig& cfg) {
  return static_cast<double>(cfg.epochs) * static_cast<double>(cfg.records) /
         static_cast<double>(cfg.job.np * static_cast<int>(cfg.batch));
}

struct Kill {
  double t;
  std::string phase;
  int rank;
};

// Carries out the faults of one trial against a running job.
class Injector {
 public:
  Injector(ChaosJob& job, const TrialConfig& cfg, std::mt19937_64& rng) : job_(job), cfg_(cfg), rng_(rng) {}
  ~Injector() { hostile_.stop(); }

  void inject(Fault& f) {
    f.injected = true;
    if (f.kind == "kill") return kill_in_phase(f);
    if (f.kind == "kill2") {
      kill_member("kill2", "", &f.rank);
      later(uniform(0, 1000), [this] { kill_member("kill2", "", nullptr); });
    } else if (f.kind == "stop" || f.kind == "stopforever") {
      auto m = pick("");
      if (!m) return void(f.note = "no member");
      f.rank = m->rank;
      job_.signal(m->pid, SIGSTOP);
      if (f.kind == "stop") {  // continued after 0.5-5 s, or once training reached 60 % of its steps
        pid_t pid = m->pid;
        later(uniform(500, 5000), [this, pid] { job_.signal(pid, SIGCONT); });
        conts_.push_back(pid);
      }
    } else if (f.kind == "join" || f.kind == "leave") {
      bool join = f.kind == "join" ? job_.slots() < cfg_.job.max_np : job_.slots() <= 2;
      if ((f.kind == "join") != join) f.note = join ? "join instead" : "leave instead";
      job_.set_slots(job_.slots() + (join ? 1 : -1));
    } else if (f.kind == "stuck" || f.kind == "flood") {
      f.rank = random_rank();
      job_.write_marker(f.kind, f.rank);
      markers_.push_back({f.kind, &f});
    } else if (f.kind == "hostile") {
      job_.log().poll();
      std::string why;
      if (!hostile_.start(job_.log().store_url, &why)) f.note = why;
      else hostile_fault_ = &f;
    }
  }

  // Runs the delayed actions that are due.
  void tick() {
    double now = now_ms();
    if (!conts_.empty() && job_.log().max_step >= static_cast<int64_t>(0.6 * est_steps(cfg_))) {
      // A stopped worker must be continued while the job still trains: one that is continued after
      // the job finished is the `stopforever` case.
      for (pid_t pid : conts_) job_.signal(pid, SIGCONT);
      conts_.clear();
    }
    for (size_t i = 0; i < delayed_.size();) {
      if (delayed_[i].first <= now) {
        auto fn = std::move(delayed_[i].second);
        delayed_.erase(delayed_.begin() + static_cast<long>(i));
        fn();
      } else {
        ++i;
      }
    }
  }

  // One kill -9 of a random member (MTBF mode).
  void kill_random() { kill_member("mtbf", "", nullptr); }

  void stop_hostile() {
    hostile_.stop();
    if (hostile_fault_) hostile_fault_->note = std::to_string(hostile_.connections()) + " connections";
  }

  // Faults whose marker is still unclaimed at the end: not triggered.
  void mark_untriggered() {
    for (auto& [name, f] : markers_)
      if (::access((job_.dir() + "/" + name).c_str(), F_OK) == 0) f->note = "untriggered";
  }

  std::vector<Kill> kills;

 private:
  void kill_in_phase(Fault& f) {
    if (f.phase == "step") {
      kill_member("step", "", &f.rank);
    } else if (f.phase == "commit" || f.phase == "sync") {
      f.rank = random_rank();
      job_.write_marker("arm." + f.phase, f.rank);
      markers_.push_back({"arm." + f.phase, &f});
      if (f.phase == "sync") {  // make the next generation sync a snapshot: a join (or, at max-np, a kill)
        if (job_.slots() < cfg_.job.max_np) {
          job_.set_slots(job_.slots() + 1);
        } else {
          f.note = "via a kill";
          kill_member("step", "", nullptr);
        }
      }
    } else if (f.phase == "rendezvous") {
      // The survivors notice a kill within milliseconds (the connection resets) and re-form in about
      // 10-20 ms here: the second kill follows 1-8 ms after the first, inline (the loop ticks 5 ms).
      std::string first = kill_member("step", "", nullptr);
      const uint64_t g0 = newest_gen();
      std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(uniform(1000, 8000))));
      // Still re-forming only if no newer generation finished its sync since the first kill.
      std::string phase = newest_gen() > g0 ? "step" : "rendezvous";
      if (phase != "rendezvous") f.note = "generation formed first";
      kill_member(phase, first, &f.rank);
    }
  }

  // A random member of the newest generation; none once a worker finished training (a kill after
  // that is no fault of the training: edl-run rightly reports the worker's non-zero exit).
  std::optional<Member> pick(const std::string& exclude) {
    auto ms = job_.members();
    if (!job_.log().done.empty()) return std::nullopt;
    ms.erase(std::remove_if(ms.begin(), ms.end(), [&](const Member& m) { return m.worker == exclude; }), ms.end());
    if (ms.empty()) return std::nullopt;
    return ms[rng_() % ms.size()];
  }

  // kill -9 of a random member other than `exclude`; returns its worker id ("" if none).
  std::string kill_member(const std::string& phase, const std::string& exclude, int* rank) {
    auto m = pick(exclude);
    if (!m) return "";
    double t = now_ms();
    if (!job_.signal(m->pid, SIGKILL)) return "";
    kills.push_back({t, phase, m->rank});
    if (rank) *rank = m->rank;
    return m->worker;
  }

  uint64_t newest_gen() {
    job_.log().poll();
    uint64_t g = 0;
    for (const auto& x : job_.log().gens) g = std::max(g, x.gen);
    return g;
  }

  int random_rank() {
    auto ms = job_.members();
    int size = ms.empty() ? 1 : ms.front().size;
    return static_cast<int>(rng_() % static_cast<uint64_t>(std::max(1, size)));
  }

  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng_); }
  void later(double delay_ms, std::function<void()> fn) { delayed_.emplace_back(now_ms() + delay_ms, std::move(fn)); }

  ChaosJob& job_;
  const TrialConfig& cfg_;
  std::mt19937_64& rng_;
  HostileClient hostile_;
  std::vector<std::pair<double, std::function<void()>>> delayed_;
  std::vector<std::pair<std::string, Fault*>> markers_;
  std::vector<pid_t> conts_;
  Fault* hostile_fault_ = nullptr;
};

std::vector<Fault> draw_faults(const TrialConfig& cfg, std::mt19937_64& rng) {
  std::vector<Fault> faults;
  if (cfg.mtbf_s > 0 || cfg.kinds.empty()) return faults;
  const int64_t hi = std::max<int64_t>(6, static_cast<int64_t>(0.7 * est_steps(cfg)));
  const int n = 1 + static_cast<int>(rng() % static_cast<uint64_t>(cfg.max_faults));
  for (int i = 0; i < n; ++i) {
    Fault f;
    f.kind = cfg.kinds[rng() % cfg.kinds.size()];
    if (f.kind == "kill") f.phase = cfg.phases[rng() % cfg.phases.size()];
    // A stop is injected in the first 40 % of training (it is continued by 60 %).
    const int64_t top = f.kind == "stop" ? std::max<int64_t>(6, hi * 4 / 7) : hi;
    f.at_step = 5 + static_cast<int64_t>(rng() % static_cast<uint64_t>(top - 4));
    faults.push_back(f);
  }
  std::sort(faults.begin(), faults.end(), [](const Fault& a, const Fault& b) { return a.at_step < b.at_step; });
  return faults;
}

// recovery_ms and lost steps of one kill at time t, from the workers' log.
bool recovery(const EventLog& log, double t, double* ms, int64_t* lost) {
  uint64_t g0 = 0;
  int64_t before = 0;
  for (const auto& g : log.gens)
    if (g.t <= t) g0 = std::max(g0, g.gen);
  for (const auto& s : log.steps)
    if (s.t <= t) {
      g0 = std::max(g0, s.gen);
      before = std::max(before, s.step);
    }
  const StepLine* first = nullptr;
  for (const auto& s : log.steps)
    if (s.gen > g0 && s.t > t && (!first || s.t < first->t)) first = &s;
  if (!first) return false;
  *ms = first->t - t;
  *lost = std::max<int64_t>(0, before - (first->step - 1));
  return true;
}

// Exit status, identical final hashes, exactly-once counters.
void audit(const TrialConfig& cfg, const std::string& dir, TrialResult& r) {
  std::string hash, counts_file;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    if (name.rfind("final.", 0) != 0 || name.size() < 5 || name.substr(name.size() - 5) != ".hash") continue;
    std::string h = slurp(e.path().string());
    if (r.final_workers++ == 0) {
      hash = h;
      counts_file = e.path().string().substr(0, e.path().string().size() - 5) + ".counts";
    } else if (h != hash) {
      r.params_identical = false;
      r.error = "final state differs between workers: '" + hash + "' vs '" + h + "' (" + name + ")";
      return;
    }
  }
  r.params_identical = r.final_workers > 0;
  r.final_hash = hash;
  if (r.final_workers == 0) {
    r.error = "no worker wrote a final state";
    return;
  }
  std::istringstream(hash) >> r.final_step;
  std::string c = slurp(counts_file);
  const size_t n = cfg.records * static_cast<size_t>(cfg.epochs);
  if (c.size() != n * sizeof(int32_t)) {
    r.error = "final counters of " + counts_file + " have " + std::to_string(c.size()) + " bytes";
    return;
  }
  const int32_t* v = reinterpret_cast<const int32_t*>(c.data());
  size_t never = 0, twice = 0;
  for (size_t i = 0; i < n; ++i) {
    never += v[i] == 0;
    twice += v[i] >= 2;
  }
  r.exactly_once = never == 0 && twice == 0;
  if (!r.exactly_once)
    r.error = std::to_string(never) + " records never trained, " + std::to_string(twice) + " trained twice or more";
}

// Reproducible mode: the final hash ("<step> <params> <counts>") of the same job run by one worker
// without edl-run, without faults and without the simulated compute; "" when that run failed.
std::string reference_hash(const TrialConfig& cfg, const std::vector<std::string>& worker_args, std::string* error) {
  char tmpl[] = "/tmp/edl-chaos-ref-XXXXXX";
  if (!::mkdtemp(tmpl)) {
    *error = "mkdtemp failed";
    return "";
  }
  const std::string dir = tmpl;
  std::vector<std::string> argv = {cfg.job.worker, "--dir", dir};
  for (size_t i = 0; i < worker_args.size(); ++i)
    argv.push_back(i > 0 && worker_args[i - 1] == "--step-ms" ? "0" : worker_args[i]);
  edl::testing::SpawnOptions so;
  so.log = dir + "/worker.log";
  edl::testing::Process p(argv, so);
  const int rc = p.wait(std::chrono::seconds(cfg.timeout_s));
  std::string hash;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".hash") hash = slurp(e.path().string());
  if (rc != 0 || hash.empty()) *error = "the 1-worker reference run failed (exit " + std::to_string(rc) + ", " + dir + ")";
  else fs::remove_all(dir);
  return rc == 0 ? hash : "";
}

}  // namespace

TrialResult run_trial(const TrialConfig& cfg) {
  TrialResult r;
  std::mt19937_64 rng(cfg.seed);
  r.faults = draw_faults(cfg, rng);
  char tmpl[] = "/tmp/edl-chaos-XXXXXX";
  if (!::mkdtemp(tmpl)) {
    r.error = "mkdtemp failed";
    return r;
  }
  JobConfig jc = cfg.job;
  jc.dir = tmpl;
  jc.job_id = "chaos-" + std::to_string(::getpid()) + "-" + std::to_string(cfg.trial) + (cfg.mtbf_s > 0 ? "-m" : "-c") +
              std::to_string(cfg.seed % 100000);
  jc.worker_args = {"--records", std::to_string(cfg.records), "--records-per-shard",
                    std::to_string(cfg.records_per_shard), "--batch", std::to_string(cfg.batch),
                    "--epochs", std::to_string(cfg.epochs), "--seed", std::to_string(cfg.seed % 1000000),
                    "--step-ms", std::to_string(cfg.step_ms), "--params", std::to_string(cfg.params),
                    "--flood-mib", std::to_string(cfg.flood_mib)};
  if (cfg.negative_control) jc.worker_args.push_back("--negative-control");
  std::string reference, reference_error;
  if (cfg.deterministic) {
    for (const std::string& a : {std::string("--deterministic"), std::string("--micro-batches"),
                                 std::to_string(cfg.micro_batches)})
      jc.worker_args.push_back(a);
    reference = reference_hash(cfg, jc.worker_args, &reference_error);
  }
  const double t0 = now_ms();
  std::vector<Kill> kills;
  {
    ChaosJob job(jc);
    Injector inj(job, cfg, rng);
    std::exponential_distribution<double> gap(1.0 / std::max(cfg.mtbf_s, 1e-3));
    double next_kill = -1;
    size_t next = 0;
    double last_inject = 0;
    for (;;) {
      if (job.poll() >= 0) break;
      double now = now_ms();
      if (now - t0 > cfg.timeout_s * 1000.0) {
        r.timed_out = true;
        break;
      }
      job.log().poll();
      inj.tick();
      if (next < r.faults.size() && job.log().max_step >= r.faults[next].at_step && now - last_inject >= 300) {
        inj.inject(r.faults[next++]);
        last_inject = now;
      }
      if (cfg.mtbf_s > 0 && job.log().max_step >= 1) {
        if (next_kill < 0) next_kill = now + 1000.0 * gap(rng);
        if (now >= next_kill) {
          inj.kill_random();
          next_kill = now + 1000.0 * gap(rng);
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    r.exit_status = job.poll();
    inj.stop_hostile();
    inj.mark_untriggered();
    job.kill_all();
    job.log().poll();
    r.wall_s = (now_ms() - t0) / 1000.0;
    kills = inj.kills;
    for (const auto& k : job.log().selfkills) kills.push_back({k.t, k.phase, k.rank});
    for (const auto& k : kills) {
      double ms = 0;
      int64_t lost = 0;
      if (recovery(job.log(), k.t, &ms, &lost)) {
        r.recovery_ms.push_back(ms);
        r.lost_steps += lost;
      }
    }
    const auto& steps = job.log().steps;
    if (steps.size() >= 2) r.span_s = (steps.back().t - steps.front().t) / 1000.0;
    for (const auto& e : job.log().errors) std::fprintf(stderr, "  worker %s\n", e.c_str());
  }
  if (r.timed_out) {
    r.error = "no exit within " + std::to_string(cfg.timeout_s) + " s (a hang)";
  } else if (r.exit_status != 0) {
    r.error = "edl-run exited with " + std::to_string(r.exit_status);
  }
  TrialResult audited = r;
  audit(cfg, jc.dir, audited);
  if (r.error.empty()) r.error = audited.error;
  r.final_workers = audited.final_workers;
  r.params_identical = audited.params_identical;
  r.exactly_once = audited.exactly_once;
  r.final_step = audited.final_step;
  if (r.span_s > 0) r.steps_per_s = static_cast<double>(r.final_step) / r.span_s;
  r.ok = !r.timed_out && r.exit_status == 0 && r.params_identical && r.exactly_once;
  if (cfg.deterministic) {
    r.matches_reference = !reference.empty() && audited.final_hash == reference;
    if (r.ok && !r.matches_reference)
      r.error = reference.empty() ? reference_error
                                  : "final state '" + audited.final_hash + "' differs from the 1-worker reference '" +
                                        reference + "'";
    r.ok = r.ok && r.matches_reference;
  }
  if (r.ok && !cfg.keep) {
    std::error_code ec;
    fs::remove_all(jc.dir, ec);
  } else if (!r.ok) {
    r.error += " (work directory " + jc.dir + ": log, edl-run.log)";
  }
  return r;
}

}  // namespace edl::bench::chaos
