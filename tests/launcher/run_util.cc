#include "launcher/run_util.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace edl::test {

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

Launch::Launch(const std::vector<std::string>& args, const std::vector<std::string>& env, bool stall_stdout) {
  char tmpl[] = "/tmp/edl-launch-XXXXXX";
  if (!mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
  dir_ = tmpl;
  std::vector<std::string> argv{EDL_RUN_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  std::string out = dir_ + "/out", err = dir_ + "/err";
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) envs.push_back(*e);
  envs.insert(envs.end(), env.begin(), env.end());
  std::vector<char*> cenv;
  for (auto& e : envs) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  int stall[2] = {-1, -1};
  if (stall_stdout && pipe2(stall, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  stalled_fd_ = stall[0];
  pid_t parent = getpid();
  pid_ = fork();
  if (pid_ == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    if (chdir(dir_.c_str()) != 0) _exit(1);  // relative paths (e.g. --pid-file pids) land in dir()
    int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(stall_stdout ? stall[1] : o, 1);
    dup2(e, 2);
    execve(cargv[0], cargv.data(), cenv.data());
    _exit(126);
  }
  if (stall[1] >= 0) close(stall[1]);
}

Launch::~Launch() {
  if (!reaped_ && pid_ > 0) {
    kill(-pid_, SIGKILL);
    kill(pid_, SIGKILL);
    int st = 0;
    waitpid(pid_, &st, 0);
  }
  if (stalled_fd_ >= 0) close(stalled_fd_);
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string Launch::out() const { return read_file(dir_ + "/out"); }
std::string Launch::err() const { return read_file(dir_ + "/err"); }

RunResult Launch::wait(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!reaped_) {
    int st = 0;
    pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      code_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(-pid_, SIGKILL);
      kill(pid_, SIGKILL);
      waitpid(pid_, &st, 0);
      reaped_ = true;
      code_ = -1;
      break;
    }
    usleep(10000);
  }
  return RunResult{code_, out(), err()};
}

void Launch::kill_launcher() {
  if (reaped_) return;
  kill(pid_, SIGKILL);
  int st = 0;
  waitpid(pid_, &st, 0);
  reaped_ = true;
  code_ = 128 + SIGKILL;
}

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    throw std::runtime_error("free_port: cannot bind 127.0.0.1:0");
  close(fd);
  return ntohs(a.sin_port);
}

std::vector<pid_t> processes_with_env(const std::vector<std::string>& needles) {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    std::string base = std::string("/proc/") + e->d_name;
    std::string stat = read_file(base + "/stat");
    size_t rp = stat.rfind(')');
    if (stat.empty() || rp == std::string::npos || rp + 2 >= stat.size() || stat[rp + 2] == 'Z') continue;
    std::string env = read_file(base + "/environ");  // NUL-separated; unreadable for others' processes
    std::string wrapped = std::string(1, '\0') + env;
    bool all = !env.empty();
    for (const auto& n : needles) all = all && wrapped.find(std::string(1, '\0') + n + std::string(1, '\0')) != std::string::npos;
    if (all) out.push_back(static_cast<pid_t>(pid));
  }
  closedir(d);
  return out;
}

bool wait_processes_gone(const std::vector<std::string>& needles, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!processes_with_env(needles).empty()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    usleep(20000);
  }
  return true;
}

RunResult run_edl(const std::vector<std::string>& args, std::chrono::milliseconds timeout,
                  const std::vector<std::string>& env) {
  Launch l(args, env);
  return l.wait(timeout);
}

}  // namespace edl::test
