#include "launcher/run_util.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>


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
  edl::testing::SpawnOptions o;
  o.stdout_path = dir_ + "/out";
  o.stderr_path = dir_ + "/err";
  o.env = env;
  o.cwd = dir_;  // relative paths (e.g. --pid-file pids) land in dir()
  o.own_group = true;
  o.die_with_parent = true;
  int stall[2] = {-1, -1};
  if (stall_stdout && pipe2(stall, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  stalled_fd_ = stall[0];
  o.stdout_fd = stall[1];
  proc_ = edl::testing::Process(argv, o);
  if (stall[1] >= 0) close(stall[1]);
}

Launch::~Launch() {
  proc_.stop(std::chrono::milliseconds(0));  // SIGKILL to the group, reaped
  if (stalled_fd_ >= 0) close(stalled_fd_);
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string Launch::out() const { return read_file(dir_ + "/out"); }
std::string Launch::err() const { return read_file(dir_ + "/err"); }

RunResult Launch::wait(std::chrono::milliseconds timeout) {
  if (!timed_out_ && proc_.wait(timeout) < 0) {
    proc_.stop(std::chrono::milliseconds(0));
    timed_out_ = true;
  }
  return RunResult{timed_out_ ? -1 : proc_.poll(), out(), err()};
}

void Launch::kill_launcher() {
  if (proc_.poll() >= 0) return;
  ::kill(proc_.pid(), SIGKILL);  // edl-run alone, not its group
  proc_.wait(std::chrono::seconds(30));
}

std::map<int, pid_t> Launch::worker_pids() const {
  std::map<int, pid_t> pids;
  for (const auto& line : lines_of(read_file(dir_ + "/pids"))) {
    std::istringstream in(line);
    int slot = 0;
    pid_t pid = 0;
    if (in >> slot >> pid) pids[slot] = pid;
  }
  return pids;
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
