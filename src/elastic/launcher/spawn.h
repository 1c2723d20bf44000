// fork + exec for edl-run: the one place the launcher starts a process (its workers through
// spawn_process, process.h; the host discovery script, discovery.h).
//
// The child gets the default action for every signal edl-run handles (signals are blocked across
// the fork, so edl-run's handlers never run in it), a process group of its own (so a terminal's
// Ctrl-C reaches only edl-run, which forwards it), PR_SET_PDEATHSIG SIGKILL (it dies with edl-run),
// stdout / stderr onto the given descriptors, optionally a CPU binding and one descriptor kept open
// across exec, then execve. Everything is prepared before the fork: the child only calls
// async-signal-safe functions. An exec failure exits 127 with "edl-run: exec <program> failed".
//
// Thread-safety: fork_exec may be called from any thread (edl-run calls it from its main thread and
// from the discovery thread).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace edl::launcher {

struct ExecSpec {
  std::vector<std::string> argv;       // argv[0] is a path: no PATH lookup (resolve_program, process.h)
  std::vector<std::string> env;        // the child's whole environment ("NAME=value")
  bool inherit_env = false;            // true: edl-run's own environment instead of `env`
  int stdout_fd = -1;                  // dup2'd onto 1; -1 = edl-run's stdout
  int stderr_fd = -1;                  // dup2'd onto 2; -1 = edl-run's stderr
  std::vector<int> cpus;               // sched_setaffinity (best effort); empty = unbound
  int inherit_fd = -1;                 // >= 3: stays open across exec (the liveness pipe)
};

// Starts spec.argv. Returns the child's pid, or -1 with errno set when fork failed.
pid_t fork_exec(const ExecSpec& spec);

}  // namespace edl::launcher
