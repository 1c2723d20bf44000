#include "launcher/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <set>
#include <stdexcept>

#include "common/host_port.h"
#include "common/spawn.h"
#include "edl/error.h"
#include "launcher/output.h"

extern char** environ;

namespace edl::launcher {
namespace {

bool is_executable_file(const std::string& path) {
  struct stat st{};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

}  // namespace

std::string resolve_program(const std::string& program) {
  if (program.find('/') != std::string::npos) {
    if (!is_executable_file(program)) throw InvalidArgument("program '" + program + "' is not an executable file");
    return program;
  }
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    std::string dir = p.substr(start, end - start);
    if (dir.empty()) dir = ".";
    std::string cand = dir + "/" + program;
    if (is_executable_file(cand)) return cand;
    start = end + 1;
  }
  throw InvalidArgument("program '" + program + "' was not found in PATH");
}

std::vector<std::string> make_environment(const std::vector<std::string>& overrides,
                                          const std::vector<std::string>& remove) {
  std::set<std::string> drop(remove.begin(), remove.end());
  for (const auto& o : overrides) drop.insert(o.substr(0, o.find('=')));
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string entry(*e);
    if (!drop.count(entry.substr(0, entry.find('=')))) env.push_back(entry);
  }
  env.insert(env.end(), overrides.begin(), overrides.end());
  return env;
}

void OutputPump::emit(const char* data, size_t n) {
  size_t len = n;
  while (len > 0 && (data[len - 1] == '\r' || data[len - 1] == ' ' || data[len - 1] == '\t')) --len;
  size_t start = 0;
  while (start < len && (data[start] == ' ' || data[start] == '\t')) ++start;
  if (start < len) last_line_.assign(data + start, std::min<size_t>(len - start, 1024));
  std::string line = "[" + tag_ + "] ";
  line.append(data, n);
  line.push_back('\n');
  output_sink(out_fd_).write(std::move(line), /*droppable=*/true);
}

void OutputPump::pump() {
  if (fd_ < 0) return;
  char buf[65536];
  // At most 4 reads per call: a worker writing without pause must not hold edl-run's loop here.
  for (int reads = 0; reads < 4; ++reads) {
    ssize_t r = ::read(fd_, buf, sizeof(buf));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (r <= 0) {
      if (!partial_.empty()) emit(partial_.data(), partial_.size());
      partial_.clear();
      close_fd();
      return;
    }
    partial_.append(buf, static_cast<size_t>(r));
    size_t start = 0;
    for (;;) {
      size_t nl = partial_.find('\n', start);
      if (nl == std::string::npos) break;
      emit(partial_.data() + start, nl - start);
      start = nl + 1;
    }
    partial_.erase(0, start);
    if (partial_.size() > (1u << 20)) {  // a 1 MiB line without newline: emit it as is
      emit(partial_.data(), partial_.size());
      partial_.clear();
    }
  }
}

void OutputPump::close_fd() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Process spawn_process(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                      const std::string& tag, const std::vector<int>& cpus, int inherit_fd) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) throw JobError("cannot start a worker: pipe failed: " + errno_text(errno));
  if (pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    throw JobError("cannot start a worker: pipe failed: " + errno_text(errno));
  }
  edl::ExecSpec spec;
  spec.argv = argv;
  spec.env = env;
  spec.stdout_fd = out[1];
  spec.stderr_fd = err[1];
  spec.cpus = cpus;
  spec.inherit_fd = inherit_fd;
  const pid_t pid = edl::fork_exec(spec);
  if (pid < 0) {
    const int e = errno;
    for (int fd : {out[0], out[1], err[0], err[1]}) ::close(fd);
    throw JobError("cannot start a worker: fork failed: " + errno_text(e));
  }
  ::close(out[1]);
  ::close(err[1]);
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  fcntl(err[0], F_SETFL, O_NONBLOCK);
  Process p;
  p.pid = pid;
  p.out = OutputPump(out[0], 1, tag);
  p.err = OutputPump(err[0], 2, tag);
  return p;
}

void signal_process(pid_t pid, int sig) {
  if (pid <= 0) return;
  if (::kill(-pid, sig) != 0) ::kill(pid, sig);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int s = WTERMSIG(status);
    const char* name = strsignal(s);
    return "was killed by signal " + std::to_string(s) + " (" + (name ? name : "?") + ")";
  }
  return "ended with status " + std::to_string(status);
}

}  // namespace edl::launcher
