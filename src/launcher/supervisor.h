// Supervisor: the event loop core shared by both edl-run modes. Owns the worker processes, pumps
// their output, turns SIGINT/SIGTERM/SIGHUP/SIGCHLD into values the caller acts on (self-pipe), and
// reaps exited workers. It also owns the liveness pipe: every worker inherits its read end as
// EDL_LAUNCHER_FD, only edl-run holds the write end, so when edl-run dies (even by SIGKILL) every
// process of every worker sees EOF and exits (src/elastic/launcher_link.h) — in addition to the
// PR_SET_PDEATHSIG that spawn_process sets on the worker itself.
// Thread-safety: one instance per process, used from the main thread only.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "launcher/process.h"

namespace edl::launcher {

struct ExitEvent {
  pid_t pid;
  int status;              // waitpid() status
  std::string last_line;   // the worker's last non-blank line on stderr (else on stdout); "" = none
};

class Supervisor {
 public:
  Supervisor();  // installs the signal handlers (once per process)
  ~Supervisor();

  pid_t start(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& tag,
              const std::vector<int>& cpus = {});

  // Waits up to timeout_ms for output, signals or exits; pumps output. Appends exited workers to
  // *exits and received SIGINT/SIGTERM/SIGHUP numbers to *signals.
  void poll_once(int timeout_ms, std::vector<ExitEvent>* exits, std::vector<int>* signals);

  void signal(pid_t pid, int sig) { signal_process(pid, sig); }
  void signal_all(int sig);
  std::vector<pid_t> running() const;
  bool any_running() const { return !running_.empty(); }
  // Drains the output of exited workers for at most timeout_ms (descendants may hold the pipes).
  void drain(int timeout_ms);

 private:
  int link_[2] = {-1, -1};  // liveness pipe: [0] inherited by workers, [1] held by edl-run only
  // The last line an exited worker wrote (its pipes are read first: the line may still be queued).
  std::string last_line_of(pid_t pid);

  std::map<pid_t, bool> running_;
  std::vector<std::unique_ptr<Process>> procs_;  // kept until both pipes hit EOF
};

}  // namespace edl::launcher
