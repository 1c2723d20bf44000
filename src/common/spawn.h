// fork + exec: the one place EDL starts a program — edl-run's workers (launcher/process.h) and its
// host discovery script (launcher/discovery.h), and, compiled into the test-support library, every
// process that tests, benches and experiments start (testing/process.h).
//
// Everything is prepared before the fork (argv, environment, CPU set); signals are blocked across
// the fork, so no handler of the parent ever runs in the child, which resets the usual ones (INT,
// TERM, HUP, QUIT, PIPE, CHLD and the fatal signals) to their default action before unblocking.
// The child then optionally takes a process group of its own (so a terminal's Ctrl-C reaches only
// the parent, which forwards it, and the parent can signal the whole group) and PR_SET_PDEATHSIG
// SIGKILL (it dies with the thread that forked it), puts the given descriptors on 0 / 1 / 2, keeps
// one descriptor open across exec, binds to CPUs, changes directory, and execs. The child only
// calls async-signal-safe functions (and strerror for the exec failure message). An exec failure
// exits 127 with "exec <program>: <reason>" on its stderr.
//
// Thread-safety: fork_exec may be called from any thread.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace edl {

struct ExecSpec {
  std::vector<std::string> argv;       // argv[0]: a path, or a name searched in PATH when path_lookup
  bool path_lookup = false;            // execvpe instead of execve
  std::vector<std::string> env;        // the child's whole environment ("NAME=value")
  bool inherit_env = false;            // true: the parent's own environment instead of `env`
  int stdin_fd = -1;                   // dup2'd onto 0; -1 = inherited
  int stdout_fd = -1;                  // dup2'd onto 1; -1 = inherited
  int stderr_fd = -1;                  // dup2'd onto 2; -1 = inherited
  std::string cwd;                     // working directory of the child; "" = the parent's
  bool own_group = true;               // setpgid(0, 0) in the child (and from the parent)
  bool die_with_parent = true;         // PR_SET_PDEATHSIG SIGKILL
  std::vector<int> cpus;               // sched_setaffinity (best effort); empty = unbound
  int inherit_fd = -1;                 // >= 3: stays open across exec (edl-run's liveness pipe)
};

// Starts spec.argv. Returns the child's pid, or -1 with errno set when fork failed (or argv is empty).
pid_t fork_exec(const ExecSpec& spec);

}  // namespace edl
