// Process spawning for tests, benches and experiments: one fork/exec helper instead of one per file.
//
// spawn() starts a program (PATH lookup when argv[0] has no '/') with extra environment variables,
// its output in a log file, optionally in a process group of its own (so kill(-pid, ...) reaches
// everything it starts) and optionally killed when the spawning thread dies (PR_SET_PDEATHSIG).
// Process owns such a child: poll / wait with a deadline / signal / stop (SIGTERM, grace, SIGKILL),
// and its destructor never leaves a child behind. fork_call() / Process::forked() run a function in
// a forked child instead of a program (ranks as processes in tests and benches). run_command() runs
// a short command to completion and returns its exit status and output (used for `ip` / `tc`).
//
// A program run by name (argv[0] without '/', or in /usr/bin, /bin, ...) must be listed in
// testing/deps_programs.txt with its Debian package: spawn(), run_command() and find_program() throw
// std::logic_error otherwise (deps.h), so a new external program cannot slip past install-deps.sh.
//
// Exit statuses are shell-style everywhere: the exit code, or 128 + signal when killed; an exec
// failure exits 127 with "exec <program>: <reason>" in the log.
//
// Thread-safety: spawn() and run_command() may be called from any thread (the child only calls
// async-signal-safe functions between fork and exec; signals are blocked across the fork until the
// child has reset handlers to their defaults). A Process is used from one thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace edl::testing {

struct SpawnOptions {
  std::string log;                   // stdout and stderr to this file (truncated); "" = inherited
  std::string stdout_path;           // stdout alone to this file; overrides `log` for stdout
  std::string stderr_path;           // stderr alone to this file; overrides `log` for stderr
  int stdout_fd = -1;                // stdout to this descriptor of the caller (e.g. a pipe's write
                                     // end; the caller keeps and closes it); overrides the paths
  std::vector<std::string> env;      // "NAME=VALUE" entries added to (or replacing in) the environment
  bool inherit_env = true;           // false: the child's environment is `env` alone
  bool append = false;               // open the output files for appending instead of truncating
  bool null_stdin = false;           // stdin from /dev/null instead of the caller's
  std::string cwd;                   // working directory of the child; "" = the caller's
  bool own_group = true;             // setpgid(0, 0): signal() and stop() reach the whole group
  bool die_with_parent = false;      // PR_SET_PDEATHSIG SIGKILL (fires when the spawning thread ends)
};

// Starts argv. Returns the child's pid; throws std::runtime_error when argv is empty or fork fails.
pid_t spawn(const std::vector<std::string>& argv, const SpawnOptions& options = {});

// Forks this process and runs fn() in the child, which then exits with fn's result (3 when fn
// throws; the exception is never seen by the parent's test framework). The child's fatal and
// termination signals get their default action (not the parent's handlers). Only `own_group` and
// `die_with_parent` of the options apply. Fork before the parent starts threads: the child has
// only the forking thread. Throws std::runtime_error when fork fails.
pid_t fork_call(const std::function<int()>& fn, const SpawnOptions& options = {});

// Shell-style status of a waitpid() status word: exit code, or 128 + signal.
int exit_status(int wait_status);

// A spawned child owned by this object.
class Process {
 public:
  Process() = default;
  explicit Process(const std::vector<std::string>& argv, const SpawnOptions& options = {});
  // A forked child running fn() (see fork_call).
  static Process forked(const std::function<int()>& fn, const SpawnOptions& options = {});
  ~Process();  // stop(0): SIGKILL to the child (its group when own_group) and reap
  Process(Process&& other) noexcept;
  Process& operator=(Process&& other) noexcept;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  bool started() const { return pid_ > 0; }
  // Exit status once the child has ended, -1 while it runs (never blocks).
  int poll();
  // Waits up to `timeout` for the child to end; its exit status, or -1 on timeout.
  int wait(std::chrono::milliseconds timeout);
  // Sends sig to the child's process group (own_group) or to the child alone.
  void signal(int sig);
  // SIGTERM, up to `grace` for it to end, then SIGKILL; returns the exit status (128 + 9 when killed).
  // With own_group, a SIGKILL also goes to the whole group even when the child itself ended.
  int stop(std::chrono::milliseconds grace);

 private:
  Process(pid_t pid, bool group) : pid_(pid), group_(group) {}
  pid_t pid_ = -1;
  bool group_ = true;
  int status_ = -1;
};

// Result of running an external command (no shell): exit status and combined stdout+stderr.
struct CommandResult {
  int status = -1;
  std::string output;
};
// Runs argv (PATH lookup) to completion. A program that cannot be started gives status -1 and the
// reason in output.
CommandResult run_command(const std::vector<std::string>& argv);

// The full path of `program` found in $PATH or in /usr/sbin, /sbin, /usr/bin, /bin; "" when absent.
// Throws std::logic_error when the program is not listed in testing/deps_programs.txt.
std::string find_program(const std::string& program);

}  // namespace edl::testing
