// ElasticJob: an elastic job under edl-run driven by a bench (elastic_bench, scale_bench). The
// workers are the synthetic worker (testing/elastic_worker.cc), which appends one line per event to
// a shared log; WorkerLog parses it. Times are CLOCK_MONOTONIC milliseconds (now_ms()), comparable
// across the processes of this machine.
//
// A SIGINT/SIGTERM of the bench kills the running jobs' edl-run processes (their workers die with
// them: edl-run sets PR_SET_PDEATHSIG): call install_job_cleanup() once in main().
//
// Thread-safety: use a job and its log from one thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/bench_util.h"

namespace edl::bench {

// Milliseconds of CLOCK_MONOTONIC (the clock of the worker's log lines).
double now_ms();

struct StepLine {
  std::string worker;
  int64_t step = 0;
  uint64_t gen = 0;
  int rank = 0, size = 0;
  double t = 0;
};

struct GenLine {
  std::string worker;
  uint64_t gen = 0;
  int rank = 0, size = 0, prev_size = 0;
  double t = 0, reform_ms = 0;
  std::string role;  // GenerationInfo's role: "newcomer", "survivor", "readmitted"
};

// Tails the workers' shared log (line formats: testing/elastic_worker.cc). The lines "step <worker>
// <step> <gen> <rank> <size> <t>", "start <worker> <pid> <t> ...", "error ..." and "done ..." are
// common to the workers that log this way; a derived log (chaos_bench's EventLog, whose chaos_worker
// writes a shorter "gen" line and lines of its own) reads the rest in parse_own().
class WorkerLog {
 public:
  explicit WorkerLog(std::string path) : tail_(std::move(path)) {}
  virtual ~WorkerLog() = default;
  void poll();

  std::vector<StepLine> steps;
  std::vector<GenLine> gens;
  std::map<std::string, pid_t> pid;                    // worker -> latest pid
  std::vector<std::pair<std::string, double>> starts;  // worker, t
  std::vector<std::string> errors;
  std::vector<std::string> done;
  int64_t max_step = -1;                               // the largest step of a step line

 protected:
  // A line of kind `kind` (its first word) before the common reader sees it: true when the derived
  // log took it whole (the common reader then skips it).
  virtual bool parse_own(const std::string& /*kind*/, const std::string& /*line*/) { return false; }

 private:
  void parse(const std::string& line);
  LineTail tail_;
};

struct ElasticJobOptions {
  std::string edl_run, worker;  // paths
  std::string dir, tag;         // files: <dir>/<tag>.log (workers), .edl-run.out, .slots, .sh
  int np = 2, min_np = 1, max_np = 2;
  double step_ms = 20;
  size_t params = 4096;
  int restart_cooldown_s = 0;   // edl-run restarts a failed slot after this pause (0 = at once)
  bool discovery = true;        // slots from a discovery script: write_slots() resizes the job
  std::string store_url;        // "" = edl-run's embedded store
  std::string secret;           // --secret ("" = edl-run's default)
  std::vector<std::string> env; // NAME=VALUE for edl-run and its workers
};

class ElasticJob {
 public:
  explicit ElasticJob(const ElasticJobOptions& options);
  ~ElasticJob() { stop(); }
  ElasticJob(const ElasticJob&) = delete;
  ElasticJob& operator=(const ElasticJob&) = delete;

  // The local slots of the discovery script (options.discovery).
  void write_slots(int n);
  // SIGTERM to edl-run, 15 s for a graceful stop, then SIGKILL to its group and to every worker.
  void stop();
  bool alive();
  pid_t pid() const { return pid_; }
  // edl-run's own output (its event log).
  const std::string& output_path() const { return out_; }

  // Polls the log until pred() or the timeout; throws on timeout or when edl-run exited.
  void wait(const std::string& what, double timeout_ms, const std::function<bool()>& pred);
  // Waits until the newest generation has `size` members and its rank 0 completed >= k steps.
  uint64_t wait_stable(int size, int k, double timeout_ms);

  WorkerLog& log() { return log_; }

 private:
  std::string slots_path_, out_;
  WorkerLog log_;
  pid_t pid_ = -1;
};

// SIGINT/SIGTERM handlers that SIGKILL the running jobs' edl-run processes, then re-raise.
void install_job_cleanup();

}  // namespace edl::bench
