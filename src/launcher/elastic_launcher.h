// ElasticLauncher: edl-run's elastic mode (private to edl-run). Keeps this host's slots filled with
// workers that rendezvous through the store; restarts failures within --reset-limit (with a per-slot
// blacklist cooldown), follows --host-discovery-script, and logs one key=value line per event
// (docs/launcher.md). elastic_mode.cc: the loop, slots, discovery, signals;
// elastic_policy.cc: what a worker exit, a generation or the store's job state means for the job.
// Thread-safety: main thread only (the StoreWatcher has its own thread).
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "launcher/autoscaler.h"
#include "launcher/binding.h"
#include "launcher/discovery.h"
#include "launcher/launcher.h"
#include "launcher/metrics_service.h"
#include "launcher/store_watcher.h"
#include "launcher/supervisor.h"

namespace edl::launcher::elastic_detail {

using Clock = std::chrono::steady_clock;

// Exit code of a worker that hit a non-retryable error (user code, data, mismatch): the runtime
// writes <job>/failed first. edl-run fails the job with it unless --retry-user-errors.
constexpr int kUserErrorExit = 3;

inline int64_t ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count();
}

struct Slot {
  int index = 0;
  pid_t pid = -1;
  int incarnation = -1;      // bumped per start: worker id host:slot.incarnation
  int failures = 0;          // consecutive failures (drives the cooldown)
  std::deque<Clock::time_point> crashes;  // failures in a row of workers that committed no step (crash loop)
  bool retired = false;      // removed by discovery: not restarted
  bool stopping = false;     // we sent SIGTERM (scale-down or shutdown)
  bool evicted = false;      // not a member when the job finished: ended by us, its exit code ignored
  bool dropped = false;      // left out of a generation while alive (stuck, stopped): ended by us, a failure
  Clock::time_point left_at{};  // when a generation left this live worker out (zero: it did not)
  Clock::time_point start_at{};  // earliest (re)start: the blacklist cooldown
  Clock::time_point started{};
  std::string worker_id;
};

class ElasticLauncher {
 public:
  ElasticLauncher(const LaunchOptions& o, Job& job) : o_(o), job_(job), autoscaler_(autoscale_options(o)) {
    program_ = resolve_program(o.command[0]);
    t0_ = Clock::now();
  }

  int run();
  std::shared_ptr<Store> first_connect(const StoreWatcherOptions& wo);

  // For a metrics exporter (any thread): the autoscaling advice (recommended_world_size(), rates())
  // and the straggler reports seen so far (docs/observability.md).
  const Autoscaler& autoscaler() const { return autoscaler_; }
  uint64_t straggler_reports() const { return straggler_reports_.load(); }

 private:
  // elastic_mode.cc
  void log(const std::string& kv);
  // The loop ended with `code`: the goodput report (log line, --report) and the last CSV row.
  int finish_metrics(int code);
  // Starts the discovery script in the background when due; applies a finished run. The loop
  // never waits for the script (it may take up to its 10 s deadline).
  void poll_discovery();
  // Runs the discovery script (first time, before the loop starts); returns this host's slots.
  int discover(bool first);
  // Logs a discovery result; returns this host's (capped) slot count or -1 when the run failed.
  int apply_discovery(const DiscoveryResult& d, bool first);
  int active_slots() const;
  // Grows or shrinks the set of active local slots to `target`.
  void resize(int target);
  void stop_slot(Slot& s);
  void start_due_slots();
  // EDL_RESET_LIMIT (workers count the same resets, see docs/launcher.md "Reset limit") and the
  // opt-in flags; variables edl-run does not set are removed so that they mean "off".
  std::vector<std::string> worker_env_removals() const;
  void add_policy_env(std::vector<std::string>* env) const;
  // The slot's next incarnation, unique across restarts of edl-run on this host: a counter in the
  // store (<job>/launcher/incarnation/<host>:<slot>), so a restarted edl-run never reuses the id of
  // a worker whose lease may still be live. Falls back to a local count if the store does not answer.
  int next_incarnation(const Slot& s);
  // next_incarnation() of each slot in `due`, several at a time.
  void draw_incarnations(const std::vector<Slot*>& due);
  void write_pids();
  void begin_stop(int sig);
  void on_signal(int sig);
  void escalate_kills();
  bool done() const;

  // elastic_observe.cc: straggler reports and the autoscaling advice from the store.
  static AutoscaleOptions autoscale_options(const LaunchOptions& o);
  void on_observations();
  void apply_recommendation(const Recommendation& r);

  // elastic_policy.cc
  void on_exit(const ExitEvent& e);
  // The crash-loop rule (docs/launcher.md, "Crash loops"): records a failure of the slot's worker;
  // true (the job is failed) when --crash-loop-limit failures in a row without a committed step fall
  // within --crash-loop-window.
  bool crash_loop(Slot& s, const ExitEvent& e, const std::string& who);
  void fail_job(int code, const std::string& reason);
  // The reason a worker wrote to <job>/failed (read now: the watcher may not have seen it yet).
  std::string failure_reason();
  // Once training finished, a worker that is not in the last generation (evicted, e.g. it was
  // stopped and its lease expired, or a replacement still joining) would hold edl-run open: end it.
  void end_non_members();
  void on_generations();
  void end_dropped(const GenerationEvent& g);
  void end_departed();
  // The reset limit as the workers count it (EDL_RESET_LIMIT): generations after the first one this
  // edl-run saw. Workers enforce it too; edl-run also covers --reset-limit 0, which they cannot express.
  void check_reset_limit(uint64_t gen);
  void check_job_health();

  int cap(int slots) const { return o_.max_np > 0 ? std::min(slots, o_.max_np) : slots; }

  const LaunchOptions& o_;
  Job& job_;
  std::string program_;
  Supervisor sup_;
  const std::vector<int> cpus_ = allowed_cpus();
  std::unique_ptr<StoreWatcher> watcher_;
  std::unique_ptr<MetricsService> metrics_;  // job metrics (docs/observability.md); fed by the main loop
  std::vector<Slot> slots_;
  std::map<pid_t, int> slot_of_;
  std::map<pid_t, Clock::time_point> kill_at_;
  std::map<std::string, Clock::time_point> pending_join_;
  std::set<std::string> members_;
  Clock::time_point t0_, next_discovery_{}, below_min_since_{}, last_failure_{};
  std::string last_discovery_;
  std::string last_discovery_error_;
  bool first_resize_ = true;
  bool stopping_ = false;    // shutting down (signal or job failure)
  bool finishing_ = false;   // a worker exited 0 / the job is marked finished: no restarts
  int restarts_ = 0;
  int result_ = 0;           // non-zero: the job failed with this code
  int final_code_ = 0;       // first non-zero exit among the final workers
  std::string reason_;       // why the job failed (result_ != 0)
  uint64_t first_gen_ = 0;   // the first generation this edl-run saw (reset counting)
  std::atomic<bool> cancel_discovery_{false};  // set when the loop ends: kills a script still running
  std::future<DiscoveryResult> discovery_;  // the discovery run in flight (declared after its flag)
  int interrupted_by_ = 0;
  Autoscaler autoscaler_;
  uint64_t last_gen_ = 0;                             // the latest generation logged (on_generations)
  uint64_t applied_gen_ = 0;                          // the generation whose decision moved the slots last
  uint64_t decisions_seen_ = 0;                       // Recommendation::decision last handled
  std::string last_throughput_;                       // the <job>/throughput value fed last
  std::map<std::string, std::string> stragglers_seen_;  // worker -> report already logged
  std::atomic<uint64_t> straggler_reports_{0};
};

}  // namespace edl::launcher::elastic_detail
