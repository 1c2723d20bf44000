// Test helper: runs the real edl-run binary in the background, in a temp dir that also holds its
// output files; every wait is bounded, the process (group) is SIGKILLed and the dir removed when
// the object dies.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "testing/ports.h"
#include "testing/process.h"

namespace edl::test {

struct RunResult {
  int code = -1;        // exit code, 128+signal, or -1 when it timed out (then it was killed)
  std::string out, err;
};

class Launch {
 public:
  // argv excludes the edl-run path itself; env entries "NAME=value" are added.
  // stall_stdout: edl-run's stdout is a pipe that nobody reads (a stalled terminal); out() is empty.
  explicit Launch(const std::vector<std::string>& args, const std::vector<std::string>& env = {},
                  bool stall_stdout = false);
  ~Launch();
  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;

  pid_t pid() const { return proc_.pid(); }
  std::string out() const;
  std::string err() const;
  // Waits until pred(out, err) holds; false on timeout.
  template <typename Pred>
  bool wait_for(Pred pred, std::chrono::milliseconds timeout) const;
  RunResult wait(std::chrono::milliseconds timeout);
  // SIGKILLs edl-run alone (not its workers: they must notice by themselves) and reaps it.
  void kill_launcher();
  const std::string& dir() const { return dir_; }
  // The worker pids in the pid file dir()/pids (started with `--pid-file pids`): slot -> pid.
  std::map<int, pid_t> worker_pids() const;

 private:
  int stalled_fd_ = -1;  // read end of the never-read stdout pipe
  std::string dir_;
  edl::testing::Process proc_;  // own process group, killed with its group when this object dies
  bool timed_out_ = false;
};

RunResult run_edl(const std::vector<std::string>& args, std::chrono::milliseconds timeout = std::chrono::seconds(30),
                  const std::vector<std::string>& env = {});

// A port that was free a moment ago (testing/ports.h).
using edl::testing::free_port;

// Live (not zombie) processes whose environment holds every one of `needles` ("NAME=value").
std::vector<pid_t> processes_with_env(const std::vector<std::string>& needles);

// Waits until no process matches `needles`; false if some still do after `timeout`.
bool wait_processes_gone(const std::vector<std::string>& needles, std::chrono::milliseconds timeout);

std::vector<std::string> lines_of(const std::string& text);
size_t count_of(const std::string& text, const std::string& needle);
std::string read_file(const std::string& path);

template <typename Pred>
bool Launch::wait_for(Pred pred, std::chrono::milliseconds timeout) const {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred(out(), err())) return true;
    struct timespec ts{0, 20 * 1000 * 1000};
    nanosleep(&ts, nullptr);
  }
  return pred(out(), err());
}

}  // namespace edl::test
