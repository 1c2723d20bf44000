// edl-run static mode: N workers with fixed ranks; the first failure stops the job.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>

#include "launcher/binding.h"
#include "launcher/launcher.h"
#include "launcher/metrics_service.h"
#include "launcher/supervisor.h"

namespace edl::launcher {

int run_static(const LaunchOptions& o, Job& job) {
  using Clock = std::chrono::steady_clock;
  std::string program = resolve_program(o.command[0]);
  std::vector<std::string> argv = o.command;
  argv[0] = program;

  Supervisor sup;
  // Job metrics only when asked for (--metrics-port / --metrics-file / --report): one generation.
  std::unique_ptr<MetricsService> metrics;
  if (o.metrics_port >= 0 || !o.metrics_file.empty() || !o.report_path.empty())
    metrics = std::make_unique<MetricsService>(metrics_options(o), Clock::now(), [](const std::string& kv) { log_event(kv); });
  std::vector<std::string> worker_ids;
  std::map<pid_t, int> rank_of;
  std::string pids;
  const std::vector<int> cpus = allowed_cpus();
  for (int r = 0; r < o.np; ++r) {
    auto env = make_environment(
        {"EDL_STORE=" + job.store_url, "EDL_JOB_SECRET=" + job.secret, "EDL_JOB_ID=" + job.job_id,
         "EDL_RANK=" + std::to_string(r), "EDL_SIZE=" + std::to_string(o.np), "EDL_LOCAL_RANK=" + std::to_string(r),
         "EDL_LOCAL_SIZE=" + std::to_string(o.np), "EDL_WORKER_ID=" + o.hostname + ":" + std::to_string(r)},
        {"EDL_ELASTIC", "EDL_MIN_NP", "EDL_MAX_NP", "EDL_METRICS_ADDR"});
    set_timeline_env(&env, o, o.hostname + "-" + std::to_string(r));
    set_gpu_env(&env, o, r);
    if (metrics && !metrics->worker_addr().empty()) env.push_back("EDL_METRICS_ADDR=" + metrics->worker_addr());
    worker_ids.push_back(o.hostname + ":" + std::to_string(r));
    if (metrics) metrics->job().on_worker_started(worker_ids.back(), Clock::now());
    const std::vector<int> bound = cpus_for_slot(o.bind_to, r, o.np, cpus);
    pid_t pid = sup.start(argv, env, std::to_string(r), bound);
    rank_of[pid] = r;
    pids += std::to_string(r) + " " + std::to_string(pid) + "\n";
    if (o.verbose)
      log_event("rank " + std::to_string(r) + " started (pid " + std::to_string(pid) + ", cpus " + cpu_list_text(bound) + ")");
  }
  write_pid_file(o.pid_file, pids);
  if (metrics) metrics->job().on_generation(0, worker_ids, Clock::now());
  if (o.verbose) log_event("job " + job.job_id + ": " + std::to_string(o.np) + " workers, store " + job.store_url);

  int first_failure = 0;
  int interrupted_by = 0;
  bool stopping = false, killed = false;
  Clock::time_point kill_at{};
  auto begin_stop = [&](int sig) {
    sup.signal_all(sig);
    if (!stopping) kill_at = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o.grace_period_s * 1000));
    stopping = true;
  };

  while (sup.any_running()) {
    int timeout = 200;
    if (stopping && !killed) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(kill_at - Clock::now()).count();
      timeout = static_cast<int>(std::clamp<int64_t>(left, 0, 200));
    }
    std::vector<ExitEvent> exits;
    std::vector<int> signals;
    sup.poll_once(timeout, &exits, &signals);
    for (const auto& e : exits) {
      int code = exit_code_of(e.status);
      int r = rank_of[e.pid];
      if (metrics) {
        metrics->job().on_worker_exit(worker_ids[r], Clock::now());
        if (code != 0 && !stopping) metrics->job().on_failure(worker_ids[r], false, Clock::now());
      }
      if (code != 0 && first_failure == 0 && !stopping) {
        first_failure = code;
        log_event("rank " + std::to_string(r) + " (pid " + std::to_string(e.pid) + ") " + describe_status(e.status) +
                  "; stopping the other workers");
        begin_stop(SIGTERM);
      } else if (code != 0 && first_failure == 0) {
        first_failure = code;  // stopped by our own signal: still the first non-zero code
      } else if (o.verbose) {
        log_event("rank " + std::to_string(r) + " (pid " + std::to_string(e.pid) + ") " + describe_status(e.status));
      }
    }
    for (int sig : signals) {
      if (!stopping) {
        interrupted_by = sig;
        log_event(std::string("received ") + strsignal(sig) + "; forwarding it to the workers");
        begin_stop(sig == SIGHUP ? SIGTERM : sig);
      } else if (!killed) {
        log_event(std::string("received ") + strsignal(sig) + " again; killing the workers");
        sup.signal_all(SIGKILL);
        killed = true;
      }
    }
    if (stopping && !killed && Clock::now() >= kill_at && sup.any_running()) {
      log_event("workers still running " + std::to_string(o.grace_period_s) + " s after SIGTERM; sending SIGKILL");
      sup.signal_all(SIGKILL);
      killed = true;
    }
  }
  sup.drain(1000);
  const int code = first_failure != 0 ? first_failure : interrupted_by ? 128 + interrupted_by : 0;
  if (metrics) metrics->finish(code);
  return code;
}

}  // namespace edl::launcher
