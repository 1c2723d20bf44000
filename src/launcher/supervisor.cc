#include "launcher/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "common/host_port.h"
#include "edl/error.h"

namespace edl::launcher {
namespace {

int g_sig_pipe[2] = {-1, -1};

void on_signal(int sig) {
  int saved = errno;
  unsigned char b = static_cast<unsigned char>(sig);
  ssize_t w = ::write(g_sig_pipe[1], &b, 1);
  (void)w;
  errno = saved;
}

void install_handlers() {
  if (g_sig_pipe[0] >= 0) return;
  if (pipe2(g_sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaction(s, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

}  // namespace

Supervisor::Supervisor() {
  install_handlers();
  if (pipe2(link_, O_CLOEXEC) != 0)
    throw JobError("cannot create the worker liveness pipe: " + errno_text(errno));
  if (link_[0] <= 2) {  // must survive the child's dup2 onto 0..2
    int fd = fcntl(link_[0], F_DUPFD_CLOEXEC, 3);
    ::close(link_[0]);
    link_[0] = fd;
  }
}

Supervisor::~Supervisor() {
  // Never leave workers behind.
  for (auto& kv : running_) signal_process(kv.first, SIGKILL);
  for (auto& kv : running_) {
    int st = 0;
    waitpid(kv.first, &st, 0);
  }
  for (int fd : link_)
    if (fd >= 0) ::close(fd);
}

pid_t Supervisor::start(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                        const std::string& tag, const std::vector<int>& cpus) {
  std::vector<std::string> full;
  for (const auto& e : env)
    if (e.rfind("EDL_LAUNCHER_FD=", 0) != 0) full.push_back(e);
  full.push_back("EDL_LAUNCHER_FD=" + std::to_string(link_[0]));
  auto p = std::make_unique<Process>(spawn_process(argv, full, tag, cpus, link_[0]));
  pid_t pid = p->pid;
  running_[pid] = true;
  procs_.push_back(std::move(p));
  return pid;
}

void Supervisor::signal_all(int sig) {
  for (auto& kv : running_) signal_process(kv.first, sig);
}

std::vector<pid_t> Supervisor::running() const {
  std::vector<pid_t> out;
  for (auto& kv : running_) out.push_back(kv.first);
  return out;
}

void Supervisor::poll_once(int timeout_ms, std::vector<ExitEvent>* exits, std::vector<int>* signals) {
  std::vector<pollfd> fds;
  std::vector<OutputPump*> pumps;
  fds.push_back({g_sig_pipe[0], POLLIN, 0});
  for (auto& p : procs_) {
    for (OutputPump* pump : {&p->out, &p->err}) {
      if (!pump->open()) continue;
      fds.push_back({pump->fd(), POLLIN, 0});
      pumps.push_back(pump);
    }
  }
  int n = ::poll(fds.data(), fds.size(), timeout_ms);
  if (n > 0) {
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents) pumps[i - 1]->pump();
    if (fds[0].revents) {
      unsigned char buf[64];
      ssize_t r;
      while ((r = ::read(g_sig_pipe[0], buf, sizeof(buf))) > 0)
        for (ssize_t i = 0; i < r; ++i)
          if (buf[i] != SIGCHLD) signals->push_back(buf[i]);
    }
  }
  // Reap (SIGCHLD may coalesce; checking every iteration is cheap).
  // Only our workers are reaped (the discovery script is another child, waited for on its own).
  for (auto it = running_.begin(); it != running_.end();) {
    int status = 0;
    pid_t pid = waitpid(it->first, &status, WNOHANG);
    if (pid == it->first) {
      exits->push_back({pid, status, last_line_of(pid)});
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
  // Forget processes whose pipes are both closed and that have exited.
  for (auto it = procs_.begin(); it != procs_.end();) {
    Process& p = **it;
    if (!p.out.open() && !p.err.open() && !running_.count(p.pid))
      it = procs_.erase(it);
    else
      ++it;
  }
}

std::string Supervisor::last_line_of(pid_t pid) {
  for (auto& p : procs_) {
    if (p->pid != pid) continue;
    for (int i = 0; i < 8 && (p->err.open() || p->out.open()); ++i) {  // what is still in the pipes (<= 2 MiB)
      p->err.pump();
      p->out.pump();
    }
    return !p->err.last_line().empty() ? p->err.last_line() : p->out.last_line();
  }
  return "";
}

void Supervisor::drain(int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    bool open = false;
    for (auto& p : procs_) open = open || p->out.open() || p->err.open();
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (!open || left.count() <= 0) break;
    std::vector<ExitEvent> exits;
    std::vector<int> sigs;
    poll_once(static_cast<int>(std::min<int64_t>(left.count(), 50)), &exits, &sigs);
  }
  for (auto& p : procs_) {
    p->out.pump();
    p->err.pump();
    p->out.close_fd();
    p->err.close_fd();
  }
}

}  // namespace edl::launcher
