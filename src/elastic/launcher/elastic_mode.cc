// edl-run elastic mode: keeps this host's slots filled with workers that rendezvous through the
// store; restarts failures within --reset-limit (with a per-slot blacklist cooldown), follows
// --host-discovery-script, and logs one key=value line per event (docs/launcher.md).
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <set>

#include "common/config.h"
#include "edl/error.h"
#include "elastic/launcher/binding.h"
#include "elastic/launcher/discovery.h"
#include "elastic/launcher/launcher.h"
#include "elastic/launcher/store_watcher.h"
#include "elastic/launcher/supervisor.h"

namespace edl::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

int64_t ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration_cast<milliseconds>(b - a).count();
}

struct Slot {
  int index = 0;
  pid_t pid = -1;
  int incarnation = -1;      // bumped per start: worker id host:slot.incarnation
  int failures = 0;          // consecutive failures (drives the cooldown)
  bool retired = false;      // removed by discovery: not restarted
  bool stopping = false;     // we sent SIGTERM (scale-down or shutdown)
  Clock::time_point start_at{};  // earliest (re)start: the blacklist cooldown
  Clock::time_point started{};
  std::string worker_id;
};

class ElasticLauncher {
 public:
  ElasticLauncher(const LaunchOptions& o, Job& job) : o_(o), job_(job) {
    program_ = resolve_program(o.command[0]);
    t0_ = Clock::now();
  }

  int run() {
    StoreOptions so;
    so.secret = job_.secret;
    so.reconnect_timeout = std::chrono::milliseconds(Config::from_env().store_timeout_ms);  // EDL_STORE_TIMEOUT_MS
    watcher_ = std::make_unique<StoreWatcher>(connect_store(job_.store_url, so), job_.job_id);
    log("event=job job=" + job_.job_id + " store=" + job_.store_url + " min_np=" + std::to_string(o_.min_np) +
        " max_np=" + std::to_string(o_.max_np) + " reset_limit=" +
        (o_.reset_limit < 0 ? std::string("unlimited") : std::to_string(o_.reset_limit)));
    int target = o_.discovery_script.empty() ? o_.np : discover(true);
    if (target < 0) target = 0;
    resize(target);
    below_min_since_ = Clock::now();
    start_due_slots();

    while (!done()) {
      std::vector<ExitEvent> exits;
      std::vector<int> signals;
      sup_.poll_once(100, &exits, &signals);
      for (int sig : signals) on_signal(sig);
      for (const auto& e : exits) on_exit(e);
      on_generations();
      check_job_health();
      if (!stopping_ && !finishing_ && !o_.discovery_script.empty() &&
          Clock::now() >= next_discovery_) {
        int t = discover(false);
        if (t >= 0) resize(t);
      }
      start_due_slots();
      escalate_kills();
    }
    sup_.drain(1000);
    watcher_.reset();
    if (result_ != 0) return result_;
    if (interrupted_by_) return 128 + interrupted_by_;
    return final_code_;
  }

 private:
  void log(const std::string& kv) {
    char t[32];
    std::snprintf(t, sizeof(t), "t=%.3f ", ms_between(t0_, Clock::now()) / 1000.0);
    log_event(t + kv);
  }

  int cap(int slots) const { return o_.max_np > 0 ? std::min(slots, o_.max_np) : slots; }

  // Runs the discovery script; returns this host's (capped) slot count or -1 when it failed.
  int discover(bool first) {
    next_discovery_ = Clock::now() + milliseconds(o_.discovery_interval_ms);
    DiscoveryResult d = run_discovery(o_.discovery_script, 10000);
    if (!d.ok) {
      if (d.error != last_discovery_error_)  // once per distinct reason, not every interval
        log("event=discovery-failed reason=\"" + d.error + "\"" + (first ? " (starting no workers yet)" : ""));
      last_discovery_error_ = d.error;
      return first ? 0 : -1;
    }
    last_discovery_error_.clear();
    std::string summary;
    for (const auto& kv : d.hosts) summary += (summary.empty() ? "" : ",") + kv.first + ":" + std::to_string(kv.second);
    if (summary != last_discovery_) {
      log("event=hosts hosts=" + (summary.empty() ? std::string("none") : summary) +
          " local=" + std::to_string(local_slots(d, o_.hostname)));
      last_discovery_ = summary;
    }
    return cap(local_slots(d, o_.hostname));
  }

  int active_slots() const {
    int n = 0;
    for (const auto& s : slots_)
      if (!s.retired) ++n;
    return n;
  }

  // Grows or shrinks the set of active local slots to `target`.
  void resize(int target) {
    int active = active_slots();
    if (target > active) {
      // Reuse retired slots first (lowest index), then new ones.
      for (auto& s : slots_) {
        if (active >= target) break;
        if (s.retired && s.pid < 0) {
          s.retired = false;
          s.failures = 0;
          s.start_at = Clock::now();
          ++active;
        }
      }
      while (active < target) {
        Slot s;
        s.index = static_cast<int>(slots_.size());
        s.start_at = Clock::now();
        slots_.push_back(s);
        ++active;
      }
      if (!first_resize_) log("event=scale-up slots=" + std::to_string(target));
    } else if (target < active) {
      // Retire the highest slots; running workers get SIGTERM (graceful leave at a batch boundary).
      for (auto it = slots_.rbegin(); it != slots_.rend() && active > target; ++it) {
        if (it->retired) continue;
        it->retired = true;
        --active;
        if (it->pid > 0) stop_slot(*it);
      }
      log("event=scale-down slots=" + std::to_string(target));
    }
    first_resize_ = false;
  }

  void stop_slot(Slot& s) {
    s.stopping = true;
    sup_.signal(s.pid, SIGTERM);
    kill_at_[s.pid] = Clock::now() + milliseconds(static_cast<int64_t>(o_.grace_s * 1000));
    log("event=stopping slot=" + std::to_string(s.index) + " worker=" + s.worker_id + " pid=" + std::to_string(s.pid));
  }

  void start_due_slots() {
    if (stopping_ || finishing_ || result_ != 0) return;
    auto now = Clock::now();
    bool changed = false;
    for (auto& s : slots_) {
      if (s.retired || s.pid > 0 || now < s.start_at) continue;
      ++s.incarnation;
      s.worker_id = o_.hostname + ":" + std::to_string(s.index) + "." + std::to_string(s.incarnation);
      auto env = make_environment(
          {"EDL_STORE=" + job_.store_url, "EDL_JOB_SECRET=" + job_.secret, "EDL_JOB_ID=" + job_.job_id,
           "EDL_ELASTIC=1", "EDL_MIN_NP=" + std::to_string(o_.min_np), "EDL_MAX_NP=" + std::to_string(o_.max_np),
           "EDL_WORKER_ID=" + s.worker_id, "EDL_HOSTNAME=" + o_.hostname,
           "EDL_RENDEZVOUS_TIMEOUT_MS=" + std::to_string(static_cast<int64_t>(o_.rendezvous_timeout_s * 1000))},
          {"EDL_RANK", "EDL_SIZE", "EDL_LOCAL_RANK", "EDL_LOCAL_SIZE"});
      std::vector<std::string> argv = o_.command;
      argv[0] = program_;
      const std::vector<int> bound = cpus_for_slot(o_.bind_to, s.index, o_.max_np, cpus_);
      s.pid = sup_.start(argv, env, s.worker_id, bound);
      s.started = now;
      s.stopping = false;
      slot_of_[s.pid] = s.index;
      pending_join_[s.worker_id] = now;
      log("event=started slot=" + std::to_string(s.index) + " worker=" + s.worker_id + " pid=" + std::to_string(s.pid) +
          " cpus=" + cpu_list_text(bound));
      changed = true;
    }
    if (changed) write_pids();
  }

  void write_pids() {
    std::string text;
    for (const auto& s : slots_)
      if (s.pid > 0) text += std::to_string(s.index) + " " + std::to_string(s.pid) + " " + s.worker_id + "\n";
    write_pid_file(o_.pid_file, text);
  }

  void on_exit(const ExitEvent& e) {
    auto it = slot_of_.find(e.pid);
    if (it == slot_of_.end()) return;
    Slot& s = slots_[it->second];
    slot_of_.erase(it);
    kill_at_.erase(e.pid);
    int code = exit_code_of(e.status);
    std::string who = "slot=" + std::to_string(s.index) + " worker=" + s.worker_id + " pid=" + std::to_string(e.pid);
    s.pid = -1;
    write_pids();
    if (s.stopping || stopping_) {
      log("event=left " + who + " status=\"" + describe_status(e.status) + "\"");
      if (finishing_ && code != 0 && final_code_ == 0 && !stopping_) final_code_ = code;
      return;
    }
    if (code == 0) {
      if (!finishing_) log("event=finished " + who + " (training done: no more restarts)");
      finishing_ = true;
      return;
    }
    // A failure.
    if (finishing_) {
      log("event=failed " + who + " status=\"" + describe_status(e.status) + "\" (after the job finished)");
      if (final_code_ == 0) final_code_ = code;
      return;
    }
    last_failure_ = Clock::now();
    ++s.failures;
    if (o_.reset_limit >= 0 && restarts_ >= o_.reset_limit) {
      log("event=failed " + who + " status=\"" + describe_status(e.status) + "\" restarts=" +
          std::to_string(restarts_) + "/" + std::to_string(o_.reset_limit) +
          " -> reset limit reached; stopping the job");
      fail_job(code);
      return;
    }
    ++restarts_;
    int64_t cooldown_ms = 0;
    if (o_.cooldown_max_s > 0) {
      int64_t c = static_cast<int64_t>(o_.cooldown_min_s) * 1000;
      for (int i = 1; i < s.failures && c < int64_t(o_.cooldown_max_s) * 1000; ++i) c = std::max<int64_t>(c * 2, 1000);
      cooldown_ms = std::min<int64_t>(c, int64_t(o_.cooldown_max_s) * 1000);
    }
    s.start_at = Clock::now() + milliseconds(cooldown_ms);
    log("event=failed " + who + " status=\"" + describe_status(e.status) + "\" restarts=" + std::to_string(restarts_) +
        "/" + (o_.reset_limit < 0 ? std::string("unlimited") : std::to_string(o_.reset_limit)) +
        " cooldown_ms=" + std::to_string(cooldown_ms));
  }

  void fail_job(int code) {
    if (result_ == 0) result_ = code != 0 ? code : 1;
    begin_stop(SIGTERM);
  }

  void begin_stop(int sig) {
    stopping_ = true;
    for (auto& s : slots_) {
      if (s.pid <= 0) continue;
      s.stopping = true;
      sup_.signal(s.pid, sig);
      if (!kill_at_.count(s.pid)) kill_at_[s.pid] = Clock::now() + milliseconds(static_cast<int64_t>(o_.grace_s * 1000));
    }
  }

  void on_signal(int sig) {
    if (interrupted_by_ == 0) {
      interrupted_by_ = sig;
      log(std::string("event=signal signal=") + strsignal(sig) + " (forwarded to the workers)");
      begin_stop(sig == SIGHUP ? SIGTERM : sig);
    } else {
      log(std::string("event=signal signal=") + strsignal(sig) + " again: killing the workers");
      sup_.signal_all(SIGKILL);
    }
  }

  void escalate_kills() {
    auto now = Clock::now();
    for (auto it = kill_at_.begin(); it != kill_at_.end();) {
      if (now >= it->second) {
        log("event=kill pid=" + std::to_string(it->first) + " (still running " + std::to_string(o_.grace_s) +
            " s after SIGTERM)");
        sup_.signal(it->first, SIGKILL);
        it = kill_at_.erase(it);
      } else {
        ++it;
      }
    }
  }

  void on_generations() {
    for (auto& g : watcher_->take_events()) {
      std::set<std::string> now(g.members.begin(), g.members.end());
      std::string joined, left;
      for (const auto& m : now)
        if (!members_.count(m)) joined += (joined.empty() ? "" : ",") + m;
      for (const auto& m : members_)
        if (!now.count(m)) left += (left.empty() ? "" : ",") + m;
      std::string line = "event=generation gen=" + std::to_string(g.gen) + " size=" + std::to_string(g.members.size());
      if (!joined.empty()) line += " joined=" + joined;
      if (!left.empty()) line += " left=" + left;
      if (last_failure_ != Clock::time_point{} && g.seen >= last_failure_) {
        line += " recover_ms=" + std::to_string(ms_between(last_failure_, g.seen));
        last_failure_ = {};
      }
      for (const auto& m : now) {
        auto p = pending_join_.find(m);
        if (p != pending_join_.end()) {
          line += " join_ms[" + m + "]=" + std::to_string(ms_between(p->second, g.seen));
          pending_join_.erase(p);
        }
      }
      log(line);
      for (auto& s : slots_)
        if (now.count(s.worker_id)) s.failures = 0;  // a successful join resets the cooldown growth
      members_ = std::move(now);
    }
  }

  void check_job_health() {
    if (stopping_ || finishing_) return;
    std::string err = watcher_->job_error();
    if (!err.empty()) {
      log("event=job-error reason=\"" + err + "\"");
      fail_job(1);
      return;
    }
    if (watcher_->finished()) {
      if (!finishing_) log("event=finished (the job marked itself finished)");
      finishing_ = true;
      return;
    }
    int live = watcher_->live_workers();
    auto now = Clock::now();
    if (live >= o_.min_np) {
      below_min_since_ = now;
      return;
    }
    if (ms_between(below_min_since_, now) > static_cast<int64_t>(o_.rendezvous_timeout_s * 1000)) {
      log("event=job-error reason=\"fewer than --min-np " + std::to_string(o_.min_np) + " live workers (" +
          std::to_string(std::max(live, 0)) + ") for more than " + std::to_string(o_.rendezvous_timeout_s) + " s\"");
      fail_job(1);
    }
  }

  bool done() const {
    if (sup_.any_running()) return false;
    if (stopping_ || finishing_ || result_ != 0) return true;
    return false;  // idle (e.g. slots cooling down or none discovered yet): keep going
  }

  const LaunchOptions& o_;
  Job& job_;
  std::string program_;
  Supervisor sup_;
  const std::vector<int> cpus_ = allowed_cpus();
  std::unique_ptr<StoreWatcher> watcher_;
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
  int interrupted_by_ = 0;
};

}  // namespace

int run_elastic(const LaunchOptions& options, Job& job) {
  ElasticLauncher launcher(options, job);
  return launcher.run();
}

}  // namespace edl::launcher
