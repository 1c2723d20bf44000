#include "elastic/launcher_link.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <string>
#include <thread>

namespace edl::elastic {
namespace {

// The exit code of a worker whose launcher died: that of a SIGKILLed process, the same as what
// PR_SET_PDEATHSIG would have produced.
constexpr int kLauncherGoneExit = 137;

std::mutex g_mu;                       // guards everything below except the pipe fds
std::function<bool()> g_on_sigterm;    // set between install and uninstall
struct sigaction g_old_term {};        // the disposition install found
bool g_handler_installed = false;
bool g_thread_started = false;
int g_sig_pipe[2] = {-1, -1};          // handler -> link thread; created once, never closed
int g_launcher_fd = -1;                // read end of edl-run's liveness pipe; -1 = not watched

void sigterm_handler(int) {
  int saved = errno;
  char b = 1;
  ssize_t w = ::write(g_sig_pipe[1], &b, 1);  // async-signal-safe; a full pipe = already pending
  (void)w;
  errno = saved;
}

[[noreturn]] void launcher_gone() {
  const char msg[] = "edl: the launcher (edl-run) holding EDL_LAUNCHER_FD is gone; exiting now\n";
  ssize_t w = ::write(2, msg, sizeof(msg) - 1);
  (void)w;
  _exit(kLauncherGoneExit);
}

// Restores the previous disposition (caller holds g_mu).
void restore_locked() {
  if (!g_handler_installed) return;
  sigaction(SIGTERM, &g_old_term, nullptr);
  g_handler_installed = false;
}

// A SIGTERM arrived: a graceful leave when a run is in progress, else what the process would
// have done without EDL (the previous disposition, re-raised).
void handle_sigterm() {
  std::unique_lock<std::mutex> lock(g_mu);
  if (g_on_sigterm && g_on_sigterm()) return;
  restore_locked();
  g_on_sigterm = nullptr;
  lock.unlock();
  ::kill(::getpid(), SIGTERM);
}

// Returns false when the launcher fd should no longer be watched (it was invalid).
bool check_launcher_fd(short revents) {
  if (revents & POLLNVAL) return false;  // the program closed it: nothing left to watch
  char buf[64];
  ssize_t r = ::read(g_launcher_fd, buf, sizeof(buf));
  if (r == 0) launcher_gone();
  if (r < 0 && errno != EINTR && errno != EAGAIN) launcher_gone();
  return true;  // edl-run never writes, but data would be harmless
}

void link_loop() {
  for (;;) {
    pollfd fds[2] = {{g_sig_pipe[0], POLLIN, 0}, {g_launcher_fd, POLLIN, 0}};
    nfds_t n = g_launcher_fd >= 0 ? 2 : 1;
    if (::poll(fds, n, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (n == 2 && fds[1].revents && !check_launcher_fd(fds[1].revents)) g_launcher_fd = -1;
    if (fds[0].revents & POLLIN) {
      char buf[64];
      while (::read(g_sig_pipe[0], buf, sizeof(buf)) > 0) {
      }
      handle_sigterm();
    }
  }
}

}  // namespace

void install_launcher_link(const Config& config, std::function<bool()> on_sigterm) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_on_sigterm = std::move(on_sigterm);
  if (!g_thread_started) {
    if (pipe2(g_sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return;  // no link: SIGTERM keeps its default
    if (config.launcher_fd >= 0 && fcntl(config.launcher_fd, F_GETFD) != -1) g_launcher_fd = config.launcher_fd;
    std::thread(link_loop).detach();  // lives as long as the process
    g_thread_started = true;
  }
  if (!g_handler_installed) {
    struct sigaction sa {};
    sa.sa_handler = sigterm_handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (sigaction(SIGTERM, &sa, &g_old_term) == 0) g_handler_installed = true;
  }
}

void uninstall_launcher_link() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_on_sigterm = nullptr;
  restore_locked();
}

}  // namespace edl::elastic
