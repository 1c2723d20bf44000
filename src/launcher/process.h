// Worker processes of edl-run: spawning with pipes, rank-prefixed output, signalling, reaping.
//
// Each worker runs in its own process group (so a terminal's Ctrl-C reaches only edl-run, which
// forwards it) and gets SIGKILL if edl-run itself dies (PR_SET_PDEATHSIG). Its stdout and stderr are
// pipes; OutputPump queues every complete line as "[TAG] line" on edl-run's bounded output sink
// (output.h), which writes it with one write(2), so lines of different workers never interleave.
// Thread-safety: used from edl-run's single main thread.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace edl::launcher {

// Resolves PROGRAM through PATH like execvp; throws InvalidArgument naming it when not found.
std::string resolve_program(const std::string& program);

// The current environment with `overrides` ("NAME=value") replacing same-named entries and the
// names in `remove` dropped.
std::vector<std::string> make_environment(const std::vector<std::string>& overrides,
                                          const std::vector<std::string>& remove);

class OutputPump {
 public:
  OutputPump(int fd, int out_fd, std::string tag) : fd_(fd), out_fd_(out_fd), tag_(std::move(tag)) {}
  int fd() const { return fd_; }
  bool open() const { return fd_ >= 0; }
  // Reads what is available (at most 256 KiB per call); queues complete lines on edl-run's
  // output sink (output.h); on EOF queues the tail and closes the fd.
  void pump();
  void close_fd();
  // The last non-blank line read so far (at most 1 KiB of it), "" when none: what a failed worker
  // said last (edl-run's crash-loop verdict names it).
  const std::string& last_line() const { return last_line_; }

 private:
  void emit(const char* data, size_t n);
  int fd_;
  int out_fd_;
  std::string tag_;
  std::string partial_;
  std::string last_line_;
};

struct Process {
  pid_t pid = -1;
  OutputPump out{-1, 1, ""};
  OutputPump err{-1, 2, ""};
};

// Forks and execs argv[0] (already resolved) with env; output tagged "[tag]"; bound to `cpus`
// when not empty (binding.h); `inherit_fd` (>= 3, or -1) stays open across exec in the child
// (edl-run's liveness pipe, EDL_LAUNCHER_FD). Throws JobError when fork or pipe fails.
Process spawn_process(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                      const std::string& tag, const std::vector<int>& cpus = {}, int inherit_fd = -1);

// Sends sig to the worker's process group (falls back to the pid).
void signal_process(pid_t pid, int sig);

// Shell-style exit code of a waitpid() status: the exit code, or 128 + signal number.
int exit_code_of(int status);
std::string describe_status(int status);

}  // namespace edl::launcher
