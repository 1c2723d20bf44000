// One elastic job of chaos_bench: an `edl-run` child running chaos_worker with a host-discovery
// file (joins and graceful leaves), the tail of the workers' shared event log (chaos_worker.cc lists
// its lines), and the hostile store client.
//
// Thread-safety: a ChaosJob and its EventLog are used from the bench's main thread only; a
// HostileClient runs its own thread and is started / stopped from the main thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "common/bench_util.h"
#include "common/elastic_job.h"  // StepLine, GenLine, now_ms (the workers' log lines)

namespace edl::bench::chaos {

// SIGINT / SIGTERM handler of chaos_bench: SIGKILL to the running job's edl-run, then the default
// action (the workers die with edl-run: PR_SET_PDEATHSIG).
void on_signal(int sig);

struct SelfKill {
  std::string worker, phase;
  int rank = 0;
  double t = 0;
};

// Incremental reader of <dir>/log: WorkerLog's common lines (steps, starts, errors, done) and
// chaos_worker's own: "gen <worker> <gen> <rank> <size> <t>", "selfkill ...", and the store URL the
// first "start" line names.
class EventLog : public WorkerLog {
 public:
  using WorkerLog::WorkerLog;
  std::vector<SelfKill> selfkills;
  std::string store_url;  // from the first start line

 protected:
  bool parse_own(const std::string& kind, const std::string& line) override;
};

struct Member {
  std::string worker;
  pid_t pid = -1;
  int rank = 0, size = 0;
};

struct JobConfig {
  std::string edl_run, worker, store, dir, job_id;
  int np = 3, max_np = 5;
  std::vector<std::string> worker_args;  // after `--dir DIR`
  int timeout_ms = 0;                    // EDL_TIMEOUT_MS for the workers (0 = the default)
};

class ChaosJob {
 public:
  explicit ChaosJob(const JobConfig& cfg);
  ~ChaosJob();
  ChaosJob(const ChaosJob&) = delete;
  ChaosJob& operator=(const ChaosJob&) = delete;

  // edl-run's exit status (128 + signal when killed) once it exited; -1 while it runs.
  int poll();
  int slots() const { return slots_; }
  void set_slots(int n);
  EventLog& log() { return log_; }
  // Members of the newest generation that trained a step, alive, children of this job's edl-run.
  std::vector<Member> members();
  // Signals pid only if it is a chaos_worker of this job (its command line names this job's dir).
  bool signal(pid_t pid, int sig);
  // Ends edl-run and every worker of this job (stopped ones included).
  void kill_all();
  // Writes <dir>/<name> = "<rank>\n" atomically (a fault-point marker of chaos_worker).
  void write_marker(const std::string& name, int rank);
  const std::string& dir() const { return cfg_.dir; }

 private:
  bool ours(pid_t pid);
  JobConfig cfg_;
  EventLog log_;
  pid_t pid_ = -1;
  int status_ = -1;
  int slots_ = 0;
};

// A misbehaving client of the job's store (loopback only): garbage bytes, a frame header announcing
// a 4 GiB body, a frame cut in the middle, many idle connections, a client dribbling one byte every
// 100 ms — all held open until stop().
class HostileClient {
 public:
  HostileClient() = default;
  ~HostileClient() { stop(); }
  // Starts against a tcp:// or redis:// URL on 127.0.0.1 / localhost; false (and `why`) otherwise.
  bool start(const std::string& url, std::string* why);
  void stop();
  int connections() const { return connections_.load(); }

 private:
  void run(int port);
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
};

}  // namespace edl::bench::chaos
