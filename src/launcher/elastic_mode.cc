// edl-run elastic mode: the event loop, the local slots (start, stop, resize), discovery, signals.
// What exits and generations mean for the job: elastic_policy.cc. Overview: elastic_launcher.h.
#include <signal.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <thread>

#include "common/config.h"
#include "edl/error.h"
#include "launcher/elastic_launcher.h"

namespace edl::launcher {
namespace elastic_detail {

using std::chrono::milliseconds;

// The first connection to the store, retried like a lost one for EDL_STORE_TIMEOUT_MS: an edl-run
// restarted on a host whose link just came back (neighbour entries still failed, a store member
// still electing a leader) waits for the store instead of failing at once. A wrong secret is final.
std::shared_ptr<Store> ElasticLauncher::first_connect(const StoreWatcherOptions& wo) {
  const auto start = Clock::now();
  bool logged = false;
  for (;;) {
    try {
      return wo.connect();
    } catch (const AuthError&) {
      throw;
    } catch (const StoreError& e) {
      if (Clock::now() - start >= wo.reconnect_timeout) throw;
      if (!logged) log(std::string("event=store-wait reason=\"") + e.what() + "\" (retrying for EDL_STORE_TIMEOUT_MS)");
      logged = true;
      std::this_thread::sleep_for(milliseconds(200));
    }
  }
}

int ElasticLauncher::run() {
  StoreWatcherOptions wo;
  wo.job_id = job_.job_id;
  wo.store_url = job_.store_url;
  wo.reconnect_timeout = milliseconds(Config::from_env().store_timeout_ms);
  StoreOptions so;
  so.secret = job_.secret;
  // The watcher reconnects itself, within wo.reconnect_timeout. The etcd client fails over between
  // members within its own retry window: with none, three answers slower than one attempt's limit
  // (2 s; an etcd serving hundreds of workers on a busy machine) made the store "unreachable" and held
  // back the restart of failed workers, so edl-run's etcd client keeps the window.
  so.reconnect_timeout = job_.store_url.rfind("etcd://", 0) == 0 ? wo.reconnect_timeout : milliseconds(0);
  so.connect_timeout = std::min<milliseconds>(so.connect_timeout, std::max<milliseconds>(wo.reconnect_timeout / 2, milliseconds(100)));
  so.request_timeout = std::min<milliseconds>(so.request_timeout, std::max<milliseconds>(wo.reconnect_timeout, milliseconds(100)));
  wo.connect = [url = job_.store_url, so] { return connect_store(url, so); };
  watcher_ = std::make_unique<StoreWatcher>(first_connect(wo), wo);
  metrics_ = std::make_unique<MetricsService>(metrics_options(o_), t0_, [this](const std::string& kv) { log(kv); });
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
    on_observations();
    check_job_health();
    if (finishing_) end_non_members();
    end_departed();
    poll_discovery();
    start_due_slots();
    escalate_kills();
  }
  cancel_discovery_ = true;  // a script still running is killed, not waited for
  sup_.drain(1000);
  watcher_.reset();
  if (result_ != 0) {
    log("event=job-failed code=" + std::to_string(result_) + " reason=\"" + reason_ + "\"");
    return finish_metrics(result_);
  }
  if (interrupted_by_) return finish_metrics(128 + interrupted_by_);
  return finish_metrics(final_code_);
}

int ElasticLauncher::finish_metrics(int code) {
  metrics_->finish(code);
  return code;
}

void ElasticLauncher::log(const std::string& kv) {
  char t[32];
  std::snprintf(t, sizeof(t), "t=%.3f ", ms_between(t0_, Clock::now()) / 1000.0);
  log_event(t + kv);
}

// Starts the discovery script in the background when due; applies a finished run. The loop
// never waits for the script (it may take up to its 10 s deadline).
void ElasticLauncher::poll_discovery() {
  if (o_.discovery_script.empty()) return;
  if (discovery_.valid()) {
    if (discovery_.wait_for(milliseconds(0)) != std::future_status::ready) return;
    int t = apply_discovery(discovery_.get(), false);
    if (t >= 0 && !stopping_ && !finishing_) resize(t);
  }
  if (stopping_ || finishing_ || Clock::now() < next_discovery_) return;
  next_discovery_ = Clock::now() + milliseconds(o_.discovery_interval_ms);
  discovery_ = std::async(std::launch::async, run_discovery, o_.discovery_script, 10000, &cancel_discovery_);
}

// Runs the discovery script (first time, before the loop starts); returns this host's slots.
int ElasticLauncher::discover(bool first) {
  next_discovery_ = Clock::now() + milliseconds(o_.discovery_interval_ms);
  return apply_discovery(run_discovery(o_.discovery_script, 10000), first);
}

// Logs a discovery result; returns this host's (capped) slot count or -1 when the run failed.
int ElasticLauncher::apply_discovery(const DiscoveryResult& d, bool first) {
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

int ElasticLauncher::active_slots() const {
  int n = 0;
  for (const auto& s : slots_)
    if (!s.retired) ++n;
  return n;
}

// Grows or shrinks the set of active local slots to `target`.
void ElasticLauncher::resize(int target) {
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

void ElasticLauncher::stop_slot(Slot& s) {
  s.stopping = true;
  sup_.signal(s.pid, SIGTERM);
  kill_at_[s.pid] = Clock::now() + milliseconds(static_cast<int64_t>(o_.grace_period_s * 1000));
  log("event=stopping slot=" + std::to_string(s.index) + " worker=" + s.worker_id + " pid=" + std::to_string(s.pid));
}

void ElasticLauncher::start_due_slots() {
  if (stopping_ || finishing_ || result_ != 0 || watcher_->unreachable()) return;
  auto now = Clock::now();
  std::vector<Slot*> due;
  for (auto& s : slots_)
    if (!s.retired && s.pid <= 0 && now >= s.start_at) due.push_back(&s);
  if (due.empty()) return;
  draw_incarnations(due);
  for (Slot* slot : due) {
    Slot& s = *slot;
    s.worker_id = o_.hostname + ":" + std::to_string(s.index) + "." + std::to_string(s.incarnation);
    auto env = make_environment(
        {"EDL_STORE=" + job_.store_url, "EDL_JOB_SECRET=" + job_.secret, "EDL_JOB_ID=" + job_.job_id,
         "EDL_ELASTIC=1", "EDL_MIN_NP=" + std::to_string(o_.min_np), "EDL_MAX_NP=" + std::to_string(o_.max_np),
         "EDL_WORKER_ID=" + s.worker_id, "EDL_HOSTNAME=" + o_.hostname,
         "EDL_RENDEZVOUS_TIMEOUT_MS=" + std::to_string(static_cast<int64_t>(o_.rendezvous_timeout_s * 1000))},
        worker_env_removals());
    add_policy_env(&env);
    if (!metrics_->worker_addr().empty()) env.push_back("EDL_METRICS_ADDR=" + metrics_->worker_addr());
    set_timeline_env(&env, o_, o_.hostname + "-" + std::to_string(s.index) + "-" + std::to_string(s.incarnation));
    set_gpu_env(&env, o_, s.index);
    std::vector<std::string> argv = o_.command;
    argv[0] = program_;
    const std::vector<int> bound = cpus_for_slot(o_.bind_to, s.index, o_.max_np, cpus_);
    s.pid = sup_.start(argv, env, s.worker_id, bound);
    s.left_at = {};
    s.started = now;
    s.stopping = false;
    slot_of_[s.pid] = s.index;
    pending_join_[s.worker_id] = now;
    metrics_->job().on_worker_started(s.worker_id, now);
    log("event=started slot=" + std::to_string(s.index) + " worker=" + s.worker_id + " pid=" + std::to_string(s.pid) +
        " cpus=" + cpu_list_text(bound));
  }
  write_pids();
}

// The incarnations of the slots about to start, drawn concurrently (each is a counter of its own,
// one store round trip): a job of hundreds of workers starting at once would otherwise wait for them
// one after another — on etcd, a raft write each.
void ElasticLauncher::draw_incarnations(const std::vector<Slot*>& due) {
  constexpr size_t kDrawers = 16;
  const size_t n = std::min(kDrawers, due.size());
  if (n == 1) {
    due[0]->incarnation = next_incarnation(*due[0]);
    return;
  }
  std::vector<int> got(due.size());
  std::vector<std::exception_ptr> failed(n);  // next_incarnation handles store errors; anything else is rethrown here
  std::vector<std::thread> drawers;
  for (size_t t = 0; t < n; ++t)
    drawers.emplace_back([&, t] {
      try {
        for (size_t i = t; i < due.size(); i += n) got[i] = next_incarnation(*due[i]);
      } catch (...) {
        failed[t] = std::current_exception();
      }
    });
  for (auto& d : drawers) d.join();
  for (const auto& e : failed)
    if (e) std::rethrow_exception(e);
  for (size_t i = 0; i < due.size(); ++i) due[i]->incarnation = got[i];
}

// EDL_RESET_LIMIT (workers count the same resets, see docs/launcher.md "Reset limit") and the
// opt-in flags; variables edl-run does not set are removed so that they mean "off".
std::vector<std::string> ElasticLauncher::worker_env_removals() const {
  std::vector<std::string> r{"EDL_RANK", "EDL_SIZE", "EDL_LOCAL_RANK", "EDL_LOCAL_SIZE", "EDL_METRICS_ADDR"};
  if (o_.reset_limit < 1) r.push_back("EDL_RESET_LIMIT");
  if (!o_.retry_user_errors) r.push_back("EDL_RETRY_USER_ERRORS");
  if (!o_.allow_restart_from_scratch) r.push_back("EDL_ALLOW_RESTART_FROM_SCRATCH");
  if (o_.straggler_factor > 0) r.push_back("EDL_STRAGGLER_FACTOR");  // the flag wins over the environment
  if (o_.straggler_steps > 0) r.push_back("EDL_STRAGGLER_STEPS");
  if (o_.evict_stragglers) r.push_back("EDL_EVICT_STRAGGLERS");
  if (o_.rebalance_stragglers) r.push_back("EDL_REBALANCE_STRAGGLERS");
  return r;
}

void ElasticLauncher::add_policy_env(std::vector<std::string>* env) const {
  if (o_.reset_limit >= 1) env->push_back("EDL_RESET_LIMIT=" + std::to_string(o_.reset_limit));
  if (o_.retry_user_errors) env->push_back("EDL_RETRY_USER_ERRORS=1");
  if (o_.allow_restart_from_scratch) env->push_back("EDL_ALLOW_RESTART_FROM_SCRATCH=1");
  if (o_.straggler_factor > 0) env->push_back("EDL_STRAGGLER_FACTOR=" + std::to_string(o_.straggler_factor));
  if (o_.straggler_steps > 0) env->push_back("EDL_STRAGGLER_STEPS=" + std::to_string(o_.straggler_steps));
  if (o_.evict_stragglers) env->push_back("EDL_EVICT_STRAGGLERS=1");
  if (o_.rebalance_stragglers) env->push_back("EDL_REBALANCE_STRAGGLERS=1");
}

// The slot's next incarnation, unique across restarts of edl-run on this host: a counter in the
// store (<job>/launcher/incarnation/<host>:<slot>), so a restarted edl-run never reuses the id of
// a worker whose lease may still be live. Falls back to a local count if the store does not answer.
int ElasticLauncher::next_incarnation(const Slot& s) {
  try {
    if (auto st = watcher_->store())
      return static_cast<int>(st->add(job_.job_id + "/launcher/incarnation/" + o_.hostname + ":" +
                                          std::to_string(s.index), 1) - 1);
  } catch (const Error& e) {
    log("event=warning reason=\"no incarnation counter from the store: " + std::string(e.what()) + "\"");
  }
  return s.incarnation + 1;
}

void ElasticLauncher::write_pids() {
  std::string text;
  for (const auto& s : slots_)
    if (s.pid > 0) text += std::to_string(s.index) + " " + std::to_string(s.pid) + " " + s.worker_id + "\n";
  write_pid_file(o_.pid_file, text);
}

void ElasticLauncher::begin_stop(int sig) {
  stopping_ = true;
  for (auto& s : slots_) {
    if (s.pid <= 0) continue;
    s.stopping = true;
    sup_.signal(s.pid, sig);
    if (!kill_at_.count(s.pid)) kill_at_[s.pid] = Clock::now() + milliseconds(static_cast<int64_t>(o_.grace_period_s * 1000));
  }
}

void ElasticLauncher::on_signal(int sig) {
  if (interrupted_by_ == 0) {
    interrupted_by_ = sig;
    log(std::string("event=signal signal=") + strsignal(sig) + " (forwarded to the workers)");
    begin_stop(sig == SIGHUP ? SIGTERM : sig);
  } else {
    log(std::string("event=signal signal=") + strsignal(sig) + " again: killing the workers");
    sup_.signal_all(SIGKILL);
  }
}

void ElasticLauncher::escalate_kills() {
  auto now = Clock::now();
  for (auto it = kill_at_.begin(); it != kill_at_.end();) {
    if (now >= it->second) {
      log("event=kill pid=" + std::to_string(it->first) + " (still running " + std::to_string(o_.grace_period_s) +
          " s after SIGTERM)");
      sup_.signal(it->first, SIGKILL);
      it = kill_at_.erase(it);
    } else {
      ++it;
    }
  }
}

bool ElasticLauncher::done() const {
  if (sup_.any_running()) return false;
  if (stopping_ || finishing_ || result_ != 0) return true;
  return false;  // idle (e.g. slots cooling down or none discovered yet): keep going
}

}  // namespace elastic_detail

int run_elastic(const LaunchOptions& options, Job& job) {
  elastic_detail::ElasticLauncher launcher(options, job);
  return launcher.run();
}

}  // namespace edl::launcher
