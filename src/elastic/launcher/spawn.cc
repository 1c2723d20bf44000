#include "elastic/launcher/spawn.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstring>

extern char** environ;

namespace edl::launcher {
namespace {

std::vector<char*> c_strings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// write(2) only: async-signal-safe.
void report_exec_failure(const char* program) {
  for (const char* p : {"edl-run: exec ", program, " failed\n"}) {
    ssize_t w = ::write(2, p, std::strlen(p));
    (void)w;
  }
}

}  // namespace

pid_t fork_exec(const ExecSpec& spec) {
  if (spec.argv.empty()) {
    errno = EINVAL;
    return -1;
  }
  std::vector<char*> cargv = c_strings(spec.argv);
  std::vector<char*> cenv = c_strings(spec.env);
  char** envp = spec.inherit_env ? environ : cenv.data();
  cpu_set_t cpu_set;
  CPU_ZERO(&cpu_set);
  for (int c : spec.cpus) CPU_SET(c, &cpu_set);
  const pid_t parent = getpid();
  // Block signals across fork: the child must not run edl-run's handlers (they would write into
  // edl-run's signal pipe) before it has reset them to the defaults.
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, &old);
  const pid_t pid = fork();
  if (pid != 0) {
    const int e = errno;
    sigprocmask(SIG_SETMASK, &old, nullptr);
    if (pid > 0) setpgid(pid, pid);  // also from the parent: no race with an early signal
    errno = e;
    return pid;
  }
  for (int s : {SIGINT, SIGTERM, SIGPIPE, SIGCHLD, SIGHUP}) signal(s, SIG_DFL);
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(137);  // edl-run died before the flag was set
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  if (spec.stdout_fd >= 0) dup2(spec.stdout_fd, 1);
  if (spec.stderr_fd >= 0) dup2(spec.stderr_fd, 2);
  if (spec.inherit_fd >= 3) fcntl(spec.inherit_fd, F_SETFD, 0);  // this child's fd table only
  if (!spec.cpus.empty()) sched_setaffinity(0, sizeof(cpu_set), &cpu_set);  // best effort
  execve(cargv[0], cargv.data(), envp);
  report_exec_failure(cargv[0]);
  _exit(127);
}

}  // namespace edl::launcher
