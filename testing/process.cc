// Process spawning (see process.h): spawn() runs on fork_exec (src/common/spawn.h, edl-run's too),
// with the environment and file descriptors prepared before the fork; fork_call() forks a function.
#include "process.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "common/spawn.h"
#include "deps.h"

extern char** environ;

namespace edl::testing {
namespace {

// The caller's environment (when `inherit`) with `extra` ("NAME=VALUE") added or replacing entries
// of the same name.
std::vector<std::string> merged_environment(const std::vector<std::string>& extra, bool inherit) {
  std::vector<std::string> env;
  for (char** e = environ; inherit && *e; ++e) env.emplace_back(*e);
  for (const auto& kv : extra) {
    const std::string name = kv.substr(0, kv.find('=') + 1);
    bool replaced = false;
    for (auto& cur : env) {
      if (cur.compare(0, name.size(), name) == 0) {
        cur = kv;
        replaced = true;
      }
    }
    if (!replaced) env.push_back(kv);
  }
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

int open_log(const std::string& path, bool append) {
  if (path.empty()) return -1;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0644);
  if (fd < 0) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  return fd;
}

// Signals are blocked from just before fork() until the child has reset the parent's handlers
// (the test framework's, netns cleanup) to their default action, so a signal sent to a fresh child
// at once never runs a handler of the parent in it.
class BlockSignals {
 public:
  BlockSignals() {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old_);
  }
  ~BlockSignals() { restore(); }
  void restore() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  // In the child: default actions, then the old mask (a pending signal is delivered here).
  void child_defaults() {
    for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL}) signal(sig, SIG_DFL);
    restore();
  }

 private:
  sigset_t old_;
};

// First steps of every child (spawn and fork_call): its own group, default signal actions, and
// death with the parent (exit 1 when the parent died before the flag was set).
void child_prologue(const SpawnOptions& o, BlockSignals& blocked, pid_t parent) {
  if (o.own_group) setpgid(0, 0);
  blocked.child_defaults();
  if (o.die_with_parent) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
  }
}

}  // namespace

int exit_status(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st); }

pid_t spawn(const std::vector<std::string>& argv, const SpawnOptions& o) {
  if (argv.empty()) throw std::runtime_error("spawn: empty argv");
  check_listed_program(argv[0]);
  ExecSpec spec;
  spec.argv = argv;
  spec.path_lookup = true;
  spec.env = merged_environment(o.env, o.inherit_env);
  const int out = open_log(o.stdout_path.empty() ? o.log : o.stdout_path, o.append);
  const int err = o.stderr_path.empty() ? (o.stdout_path.empty() ? out : open_log(o.log, o.append))
                                        : open_log(o.stderr_path, o.append);
  const int in = o.null_stdin ? ::open("/dev/null", O_RDONLY | O_CLOEXEC) : -1;
  spec.stdin_fd = in;
  spec.stdout_fd = o.stdout_fd >= 0 ? o.stdout_fd : out;
  spec.stderr_fd = err;
  spec.cwd = o.cwd;
  spec.own_group = o.own_group;
  spec.die_with_parent = o.die_with_parent;
  const pid_t pid = fork_exec(spec);  // src/common/spawn.h: the fork + exec edl-run uses too
  const int fork_errno = errno;
  if (out >= 0) close(out);
  if (err >= 0 && err != out) close(err);
  if (in >= 0) close(in);
  if (pid < 0) throw std::runtime_error("cannot start " + argv[0] + ": fork failed: " + std::strerror(fork_errno));
  return pid;
}

pid_t fork_call(const std::function<int()>& fn, const SpawnOptions& o) {
  const pid_t parent = getpid();
  BlockSignals blocked;
  const pid_t pid = fork();
  if (pid == 0) {
    child_prologue(o, blocked, parent);
    int code = 3;
    try {
      code = fn();
    } catch (...) {
    }
    _exit(code);
  }
  const int fork_errno = errno;
  blocked.restore();
  if (pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(fork_errno));
  if (o.own_group) setpgid(pid, pid);
  return pid;
}

Process Process::forked(const std::function<int()>& fn, const SpawnOptions& options) {
  return Process(fork_call(fn, options), options.own_group);
}

Process::Process(const std::vector<std::string>& argv, const SpawnOptions& options)
    : pid_(spawn(argv, options)), group_(options.own_group) {}

Process::~Process() { stop(std::chrono::milliseconds(0)); }

Process::Process(Process&& other) noexcept { *this = std::move(other); }

Process& Process::operator=(Process&& other) noexcept {
  if (this != &other) {
    stop(std::chrono::milliseconds(0));
    pid_ = other.pid_;
    group_ = other.group_;
    status_ = other.status_;
    other.pid_ = -1;
    other.status_ = -1;
  }
  return *this;
}

int Process::poll() {
  if (status_ >= 0 || pid_ <= 0) return status_;
  int st = 0;
  if (waitpid(pid_, &st, WNOHANG) == pid_) status_ = exit_status(st);
  return status_;
}

int Process::wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (poll() < 0 && pid_ > 0) {
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return status_;
}

void Process::signal(int sig) {
  if (pid_ <= 0) return;
  if (group_) ::kill(-pid_, sig);
  if (poll() < 0) ::kill(pid_, sig);
}

int Process::stop(std::chrono::milliseconds grace) {
  if (pid_ <= 0) return status_;
  if (poll() < 0 && grace.count() > 0) {
    signal(SIGTERM);
    wait(grace);
  }
  if (group_) ::kill(-pid_, SIGKILL);  // also whatever the child left behind in its group
  if (poll() < 0) {
    ::kill(pid_, SIGKILL);
    int st = 0;
    while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
    status_ = exit_status(st);
  }
  return status_;
}

CommandResult run_command(const std::vector<std::string>& argv) {
  CommandResult r;
  if (argv.empty()) {
    r.output = "run_command: empty argv";
    return r;
  }
  check_listed_program(argv[0]);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe failed: ") + std::strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  std::vector<std::string> args = argv;
  std::vector<char*> cargs = c_strings(args);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, cargs[0], &fa, nullptr, cargs.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    r.output = "cannot start " + argv[0] + ": " + std::strerror(rc);
    return r;
  }
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) r.output.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  r.status = exit_status(st);
  return r;
}

std::string find_program(const std::string& program) {
  check_listed_program(program);
  if (program.find('/') != std::string::npos) return access(program.c_str(), X_OK) == 0 ? program : "";
  std::vector<std::string> dirs;
  if (const char* path = std::getenv("PATH")) {
    std::string p = path;
    for (size_t start = 0;;) {
      size_t colon = p.find(':', start);
      dirs.push_back(p.substr(start, colon == std::string::npos ? std::string::npos : colon - start));
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
  }
  for (const char* d : {"/usr/sbin", "/sbin", "/usr/bin", "/bin"}) dirs.emplace_back(d);
  for (const auto& d : dirs) {
    if (d.empty()) continue;
    std::string full = d + "/" + program;
    if (access(full.c_str(), X_OK) == 0) return full;
  }
  return "";
}

}  // namespace edl::testing
