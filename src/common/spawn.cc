#include "common/spawn.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

extern char** environ;

namespace edl {
namespace {

std::vector<char*> c_strings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// write(2) only, apart from strerror.
void report_exec_failure(const char* what, int err) {
  const char* parts[] = {"exec ", what, ": ", strerror(err), "\n"};
  for (const char* p : parts) {
    ssize_t w = ::write(2, p, std::strlen(p));
    (void)w;
  }
}

// In the child, before exec.
[[noreturn]] void exec_child(const ExecSpec& spec, char** argv, char** envp, const cpu_set_t& cpu_set,
                             pid_t parent) {
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD, SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL})
    signal(s, SIG_DFL);
  if (spec.own_group) setpgid(0, 0);
  if (spec.die_with_parent) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(137);  // the parent died before the flag was set
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);  // the new program starts with no signal blocked
  if (spec.stdin_fd >= 0) dup2(spec.stdin_fd, 0);
  if (spec.stdout_fd >= 0) dup2(spec.stdout_fd, 1);
  if (spec.stderr_fd >= 0) dup2(spec.stderr_fd, 2);
  if (spec.inherit_fd >= 3) fcntl(spec.inherit_fd, F_SETFD, 0);  // this child's fd table only
  if (!spec.cpus.empty()) sched_setaffinity(0, sizeof(cpu_set), &cpu_set);  // best effort
  if (!spec.cwd.empty() && chdir(spec.cwd.c_str()) != 0) {
    report_exec_failure(spec.cwd.c_str(), errno);
    _exit(127);
  }
  if (spec.path_lookup) execvpe(argv[0], argv, envp);
  else execve(argv[0], argv, envp);
  report_exec_failure(argv[0], errno);
  _exit(127);
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
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  const pid_t pid = fork();
  if (pid == 0) exec_child(spec, cargv.data(), envp, cpu_set, parent);
  const int e = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid > 0 && spec.own_group) setpgid(pid, pid);  // also from the parent: no race with an early signal
  errno = e;
  return pid;
}

}  // namespace edl
