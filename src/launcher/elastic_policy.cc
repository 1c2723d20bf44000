// edl-run elastic mode, the job policy: what a worker's exit, a new generation or the job state in the
// store (<job>/failed, job errors, lost store, reset limit) means — restart, evict, or fail the job.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/config.h"
#include "edl/error.h"
#include "launcher/elastic_launcher.h"

namespace edl::launcher::elastic_detail {

using std::chrono::milliseconds;

void ElasticLauncher::on_exit(const ExitEvent& e) {
  auto it = slot_of_.find(e.pid);
  if (it == slot_of_.end()) return;
  Slot& s = slots_[it->second];
  slot_of_.erase(it);
  metrics_->job().on_worker_exit(s.worker_id, Clock::now());
  kill_at_.erase(e.pid);
  int code = exit_code_of(e.status);
  std::string who = "slot=" + std::to_string(s.index) + " worker=" + s.worker_id + " pid=" + std::to_string(e.pid);
  s.pid = -1;
  s.left_at = {};
  write_pids();
  const bool dropped = s.dropped;  // ended by us because a generation left it out: a failure, never "finished"
  s.dropped = false;
  if (dropped && !stopping_ && !finishing_) {
    s.stopping = false;
    if (code == 0) code = 1;
  }
  if (s.stopping || stopping_ || (dropped && finishing_)) {
    log("event=left " + who + " status=\"" + describe_status(e.status) + "\"" + (s.evicted ? " (evicted)" : ""));
    if (finishing_ && code != 0 && final_code_ == 0 && !stopping_ && !s.evicted && !dropped) final_code_ = code;
    s.evicted = false;
    return;
  }
  if (code == 0) {
    if (!finishing_) log("event=finished " + who + " (training done: no more restarts)");
    finishing_ = true;
    return;
  }
  // A failure.
  metrics_->job().on_failure(s.worker_id, !finishing_, Clock::now());
  if (finishing_) {
    log("event=failed " + who + " status=\"" + describe_status(e.status) + "\" (after the job finished)");
    if (final_code_ == 0) final_code_ = code;
    return;
  }
  if (code == kUserErrorExit && !o_.retry_user_errors) {
    std::string why = failure_reason();
    log("event=failed " + who + " status=\"" + describe_status(e.status) + "\" (non-retryable error: " + why + ")");
    fail_job(kUserErrorExit, "worker " + s.worker_id + ": " + why);
    return;
  }
  last_failure_ = Clock::now();
  if (watcher_->unreachable()) {  // the store is down: not the worker's fault; restart once it is back
    log("event=failed " + who + " status=\"" + describe_status(e.status) + "\" (the store is unreachable: "
        "restart when it answers again, not counted)");
    s.start_at = Clock::now();
    return;
  }
  ++s.failures;
  if (crash_loop(s, e, who)) return;
  if (o_.reset_limit >= 0 && restarts_ >= o_.reset_limit) {
    log("event=failed " + who + " status=\"" + describe_status(e.status) + "\" restarts=" +
        std::to_string(restarts_) + "/" + std::to_string(o_.reset_limit) +
        " -> reset limit reached; stopping the job");
    fail_job(code, "worker " + s.worker_id + " " + describe_status(e.status) + " after " + std::to_string(restarts_) +
                       " restarts (--reset-limit " + std::to_string(o_.reset_limit) + ")");
    return;
  }
  ++restarts_;
  metrics_->job().on_restart(Clock::now());
  int64_t cooldown_ms = 0;
  if (o_.cooldown_max_s > 0) {
    int64_t c = static_cast<int64_t>(o_.cooldown_min_s) * 1000;
    for (int i = 1; i < s.failures && c < int64_t(o_.cooldown_max_s) * 1000; ++i) c = std::max<int64_t>(c * 2, 1000);
    cooldown_ms = std::min<int64_t>(c, int64_t(o_.cooldown_max_s) * 1000);
  }
  s.start_at = Clock::now() + milliseconds(cooldown_ms);
  log("event=failed " + who + " status=\"" + describe_status(e.status) + "\" restarts=" + std::to_string(restarts_) +
      "/" + (o_.reset_limit < 0 ? std::string("unlimited") : std::to_string(o_.reset_limit)) +
      " cooldown_ms=" + std::to_string(cooldown_ms) +
      (s.crashes.empty() ? "" : " crash_loop=" + std::to_string(s.crashes.size()) + "/" +
                                    std::to_string(o_.crash_loop_limit)));
}

bool ElasticLauncher::crash_loop(Slot& s, const ExitEvent& e, const std::string& who) {
  if (o_.crash_loop_limit <= 0) return false;
  if (metrics_->job().committed_progress(s.worker_id)) {  // it trained: an ordinary failure
    s.crashes.clear();
    return false;
  }
  const auto now = Clock::now();
  s.crashes.push_back(now);
  const auto window = milliseconds(static_cast<int64_t>(o_.crash_loop_window_s * 1000));
  while (o_.crash_loop_window_s > 0 && !s.crashes.empty() && now - s.crashes.front() > window) s.crashes.pop_front();
  if (static_cast<int>(s.crashes.size()) < o_.crash_loop_limit) return false;
  char span[32];
  std::snprintf(span, sizeof(span), "%.1f", ms_between(s.crashes.front(), now) / 1000.0);
  std::string said = e.last_line;
  std::replace(said.begin(), said.end(), '"', '\'');  // the reason is quoted in the event log
  said = said.empty() ? "(it wrote nothing)" : "'" + said + "'";
  log("event=failed " + who + " status=\"" + describe_status(e.status) + "\" -> crash loop: " +
      std::to_string(s.crashes.size()) + " failures in a row without a committed step; stopping the job");
  const std::string why = "crash loop: the worker of slot " + std::to_string(s.index) + " failed " +
                          std::to_string(s.crashes.size()) + " times in a row within " + span +
                          " s without committing a step (--crash-loop-limit " + std::to_string(o_.crash_loop_limit) +
                          ", --crash-loop-window " + std::to_string(static_cast<int64_t>(o_.crash_loop_window_s)) +
                          " s); the last one, " + s.worker_id + ", " + describe_status(e.status) +
                          "; its last line: " + said;
  fail_job(exit_code_of(e.status), why);
  return true;
}

void ElasticLauncher::fail_job(int code, const std::string& reason) {
  if (result_ == 0) {
    result_ = code != 0 ? code : 1;
    reason_ = reason;
  }
  begin_stop(SIGTERM);
}

// The reason a worker wrote to <job>/failed (read now: the watcher may not have seen it yet).
std::string ElasticLauncher::failure_reason() {
  std::string r = watcher_->job_failed();
  if (!r.empty()) return r;
  try {
    if (auto st = watcher_->store())
      if (auto v = st->get(job_.job_id + "/failed")) return *v;
  } catch (const Error&) {
  }
  return "exit code 3 = non-retryable error (no reason in " + job_.job_id + "/failed)";
}

// Once training finished, a worker that is not in the last generation (evicted, e.g. it was
// stopped and its lease expired, or a replacement still joining) would hold edl-run open: end it.
void ElasticLauncher::end_non_members() {
  if (members_.empty() || stopping_) return;
  for (auto& s : slots_) {
    if (s.pid <= 0 || s.stopping || members_.count(s.worker_id)) continue;
    s.evicted = true;
    log("event=evict slot=" + std::to_string(s.index) + " worker=" + s.worker_id +
        " (not in the final generation; training finished)");
    stop_slot(s);
    sup_.signal(s.pid, SIGCONT);  // a stopped process must run to act on SIGTERM
  }
}

// A local worker that a generation left out while its process lives on (stuck in a step, stopped):
// it cannot rejoin in time and holds its slot, so end it (SIGTERM + SIGCONT, SIGKILL after
// --grace-period); its exit counts as a failure, so the slot cools down and is started again.
void ElasticLauncher::end_dropped(const GenerationEvent& g) {
  if (stopping_ || finishing_) return;
  for (const auto& [worker, why] : g.dropped) {
    for (auto& s : slots_) {
      if (s.pid <= 0 || s.stopping || s.worker_id != worker) continue;
      s.dropped = true;
      log("event=evict slot=" + std::to_string(s.index) + " worker=" + worker + " gen=" + std::to_string(g.gen) +
          " reason=\"" + why + "\"");
      stop_slot(s);
      sup_.signal(s.pid, SIGCONT);  // a stopped process must run to act on SIGTERM
    }
  }
}

// A local worker left out of the membership that still runs --grace-period later (its dropped
// reason may not have been readable with the generation, or it left without one) is ended the same
// way: a graceful leaver exits by itself well within that time.
void ElasticLauncher::end_departed() {
  if (stopping_ || finishing_) return;
  const auto now = Clock::now();
  for (auto& s : slots_) {
    if (s.pid <= 0 || s.stopping || s.left_at == Clock::time_point{}) continue;
    if (now - s.left_at < milliseconds(static_cast<int64_t>(o_.grace_period_s * 1000))) continue;
    s.dropped = true;
    s.left_at = {};
    log("event=evict slot=" + std::to_string(s.index) + " worker=" + s.worker_id +
        " reason=\"left out of the membership and still running after --grace-period\"");
    stop_slot(s);
    sup_.signal(s.pid, SIGCONT);
  }
}

void ElasticLauncher::on_generations() {
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
    metrics_->job().on_generation(g.gen, g.members, g.seen);
    for (auto& s : slots_) {
      if (s.pid <= 0) continue;
      if (now.count(s.worker_id)) s.left_at = {};                        // (re)admitted
      else if (members_.count(s.worker_id) && s.left_at == Clock::time_point{}) s.left_at = g.seen;  // left out
    }
    end_dropped(g);
    check_reset_limit(g.gen);
    for (auto& s : slots_)
      if (now.count(s.worker_id)) s.failures = 0;  // a successful join resets the cooldown growth
    members_ = std::move(now);
    last_gen_ = g.gen;
  }
}

// The reset limit as the workers count it (EDL_RESET_LIMIT): generations after the first one this
// edl-run saw. Workers enforce it too; edl-run also covers --reset-limit 0, which they cannot express.
void ElasticLauncher::check_reset_limit(uint64_t gen) {
  if (first_gen_ == 0) first_gen_ = gen;
  uint64_t resets = gen - first_gen_;
  if (o_.reset_limit < 0 || resets <= static_cast<uint64_t>(o_.reset_limit) || finishing_ || stopping_) return;
  std::string why = "reset limit of " + std::to_string(o_.reset_limit) + " reached (--reset-limit): generation " +
                    std::to_string(gen) + " is reset " + std::to_string(resets) + " after generation " +
                    std::to_string(first_gen_);
  log("event=job-error reason=\"" + why + "\"");
  fail_job(1, why);
}

void ElasticLauncher::check_job_health() {
  if (stopping_) return;
  std::string failed = watcher_->job_failed();
  if (!failed.empty() && !o_.retry_user_errors) {
    log("event=job-error reason=\"" + failed + "\" (" + job_.job_id + "/failed)");
    fail_job(kUserErrorExit, failed);
    return;
  }
  if (finishing_) return;
  std::string lost = watcher_->store_lost();
  if (!lost.empty()) {
    log("event=job-error reason=\"" + lost + "\"");
    fail_job(1, lost);
    return;
  }
  std::string err = watcher_->job_error();
  if (!err.empty()) {
    log("event=job-error reason=\"" + err + "\"");
    fail_job(1, err);
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
  if (watcher_->unreachable()) below_min_since_ = now;  // unknown while the store is down (store_lost decides)
  if (ms_between(below_min_since_, now) > static_cast<int64_t>(o_.rendezvous_timeout_s * 1000)) {
    std::string why = "fewer than --min-np " + std::to_string(o_.min_np) + " live workers (" +
                      std::to_string(std::max(live, 0)) + ") for more than " +
                      std::to_string(o_.rendezvous_timeout_s) + " s";
    log("event=job-error reason=\"" + why + "\"");
    fail_job(1, why);
  }
}

}  // namespace edl::launcher::elastic_detail
