// edl-run and a job that cannot go on: the crash-loop rule (a deterministic failure is never restarted
// forever), the job id kept in the checkpoint (rerunning the same command after a whole-job crash
// resumes), and no worker aborting on SIGTERM while it exits (docs/launcher.md, "Crash loops" and
// "Whole-job restart").
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "launcher/parse_util.h"
#include "launcher/run_util.h"

using namespace std::chrono_literals;
using edl::test::count_of;
using edl::test::Launch;
using edl::test::lines_of;
using edl::test::run_edl;

namespace {

const std::string kHelper = EDL_LAUNCHER_HELPER;

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/edl-crashloop-XXXXXX";
    REQUIRE(mkdtemp(tmpl));
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// The job-failed line of edl-run's event log ("" when none).
std::string job_failed_line(const std::string& err) {
  for (const auto& line : lines_of(err))
    if (line.find("event=job-failed") != std::string::npos) return line;
  return "";
}

// The step in the header of a checkpoint file ("EDLCKPT2" | step i64 little-endian | ...,
// src/elastic/checkpoint.h); -1 while there is none. The file is replaced by a rename: never torn.
int64_t checkpoint_step(const std::string& path) {
  const std::string bytes = edl::test::read_file(path);
  if (bytes.size() < 16 || bytes.compare(0, 8, "EDLCKPT2") != 0) return -1;
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(bytes[8 + i]);
  return static_cast<int64_t>(v);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("edl-run options: --crash-loop-limit and --crash-loop-window", "[launcher][crashloop]") {
  auto o = edl::test::parse_launch_options({"-np", "1", "--elastic", "prog"});
  REQUIRE(o);
  CHECK(o->crash_loop_limit == 5);
  CHECK(o->crash_loop_window_s == 600);
  o = edl::test::parse_launch_options({"-np", "1", "--crash-loop-limit", "0", "--crash-loop-window", "0", "--elastic",
                                       "prog"});
  REQUIRE(o);
  CHECK(o->crash_loop_limit == 0);
  CHECK(o->crash_loop_window_s == 0);
  CHECK_FALSE(edl::test::parse_launch_options({"-np", "1", "--crash-loop-limit", "-1", "--elastic", "prog"}));
  CHECK_FALSE(edl::test::parse_launch_options({"-np", "1", "--crash-loop-window", "-2", "--elastic", "prog"}));
}

TEST_CASE("edl-run elastic: a worker that always fails at start ends the job, naming its last line",
          "[launcher][elastic][crashloop]") {
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_edl({"--min-np", "1", "-np", "2", "--crash-loop-limit", "3", "--crash-loop-window", "30", kHelper,
                    "fail-at-start", "config error: no such file /data/train.idx"},
                   60s);
  INFO(r.err);
  CHECK(r.code == 1);  // the worker's exit code
  CHECK(seconds_since(t0) < 30);
  const std::string failed = job_failed_line(r.err);
  CHECK(failed.find("crash loop") != std::string::npos);
  CHECK(failed.find("failed 3 times in a row") != std::string::npos);
  CHECK(failed.find("its last line: 'config error: no such file /data/train.idx'") != std::string::npos);
  CHECK(count_of(r.err, "event=started") <= 6);  // each slot at most 3 times
  CHECK(r.err.find("crash_loop=2/3") != std::string::npos);

  // The default: 5 failures in a row.
  auto d = run_edl({"--min-np", "1", "-np", "1", kHelper, "fail-at-start", "bad input"}, 60s);
  INFO(d.err);
  CHECK(d.code == 1);
  CHECK(count_of(d.err, "event=started") == 5);
  CHECK(job_failed_line(d.err).find("failed 5 times in a row") != std::string::npos);
}

TEST_CASE("edl-run elastic: --crash-loop-window: only failures within the window count", "[launcher][elastic][crashloop]") {
  // Failures 1 s apart (the cooldown) never put 2 within a 0.5 s window: restarted until --reset-limit.
  auto r = run_edl({"--min-np", "1", "-np", "1", "--crash-loop-limit", "2", "--crash-loop-window", "0.5",
                    "--blacklist-cooldown-range", "1,1", "--reset-limit", "3", kHelper, "fail-at-start", "flaky"},
                   60s);
  INFO(r.err);
  CHECK(r.code == 1);
  CHECK(r.err.find("crash loop") == std::string::npos);
  CHECK(r.err.find("reset limit reached") != std::string::npos);
  CHECK(count_of(r.err, "event=started") == 4);
}

TEST_CASE("edl-run elastic: a worker that fails now and then while committing steps is still restarted",
          "[launcher][elastic][crashloop]") {
  // Slot 1's incarnations 0, 1 and 2 each crash after 15 steps of their own (each committed): three
  // failures in a row, above --crash-loop-limit 2, but none without progress.
  auto r = run_edl({"--min-np", "1", "--max-np", "2", "-np", "2", "--crash-loop-limit", "2", "--grace-period", "3",
                    kHelper, "elastic-train", "200", "15", "--crash-after-steps", "15", "--crash-incarnations", "3"},
                   120s);
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(count_of(r.err, "event=failed slot=1") == 3);
  CHECK(r.err.find("crash loop") == std::string::npos);
  CHECK(count_of(r.err, "crash after 15 steps") == 3);
  CHECK(count_of(r.out, "] done 200 ") >= 1);
}

TEST_CASE("edl-run elastic: rerunning the same command after a whole-job crash resumes from the checkpoint",
          "[launcher][elastic][crashloop]") {
  TempDir ckpt;
  const std::vector<std::string> args = {"--min-np", "1", "--max-np", "2", "-np", "2", "--pid-file", "pids",
                                         kHelper, "elastic-train", "300", "10", "--print-every", "20"};
  const std::vector<std::string> env = {"EDL_CHECKPOINT_DIR=" + ckpt.path};
  {
    Launch first(args, env);
    REQUIRE(first.wait_for([](const std::string& out, const std::string&) { return out.find("] step 100") != std::string::npos; },
                           60s));
    // Rank 0 writes the checkpoint from a background thread (docs/elastic.md, "State"): when it
    // prints step 100 the file may still hold step 99 or older, and on a loaded machine a kill at
    // that moment resumed from 99. Wait for the file itself.
    const std::string file = ckpt.path + "/state.edlckpt";
    REQUIRE(first.wait_for([&](const std::string&, const std::string&) { return checkpoint_step(file) >= 100; }, 60s));
    // The whole job crashes: every worker and edl-run killed with SIGKILL.
    for (const auto& [slot, pid] : first.worker_pids()) kill(pid, SIGKILL);
    first.kill_launcher();
    INFO(first.err());
    CHECK(first.err().find("taken from the checkpoint") == std::string::npos);  // a new job: a random id
  }
  Launch again(args, env);  // the same command line and environment
  auto r = again.wait(90s);
  INFO(r.err);
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK(r.err.find("taken from the checkpoint " + ckpt.path + "/state.edlckpt") != std::string::npos);
  std::smatch m;
  const std::regex start(R"(\] start step (\d+))");
  REQUIRE(std::regex_search(r.out, m, start));
  CHECK(std::stoll(m[1]) >= 100);  // resumed, not from step 0
  CHECK(r.out.find("] start step 0") == std::string::npos);
  CHECK(count_of(r.out, "] done 300 ") == 2);
}

TEST_CASE("edl-run elastic: workers ending after run() threw do not abort on SIGTERM", "[launcher][elastic][crashloop]") {
  // A checkpoint of job A; workers of job B refuse it (DataError), return 1 from main without
  // edl::shutdown() and are restarted (--crash-loop-limit 0). SIGTERM hits them at random moments of
  // that cycle, many of them while exiting: none may die by SIGABRT ("terminate called ...").
  TempDir ckpt;
  const std::vector<std::string> env = {"EDL_CHECKPOINT_DIR=" + ckpt.path};
  auto a = run_edl({"--min-np", "1", "-np", "1", "--job-id", "job-a", kHelper, "elastic-train", "5", "1"}, 60s, env);
  REQUIRE(a.code == 0);
  for (int round = 0; round < 3; ++round) {
    Launch b({"--min-np", "1", "--max-np", "3", "-np", "3", "--job-id", "job-b", "--crash-loop-limit", "0",
              "--grace-period", "5", kHelper, "elastic-train", "50", "1", "--catch"},
             env);
    REQUIRE(b.wait_for([](const std::string&, const std::string& err) { return count_of(err, "event=failed") >= 6; },
                       60s));
    std::this_thread::sleep_for(std::chrono::milliseconds(100 * round));
    kill(b.pid(), SIGTERM);
    auto r = b.wait(60s);
    INFO(r.err);
    CHECK(r.code == 128 + SIGTERM);
    CHECK(r.err.find("terminate called") == std::string::npos);
    CHECK(r.err.find("signal 6") == std::string::npos);
    CHECK(r.err.find("belongs to job 'job-a', not to this job 'job-b' (EDL_JOB_ID); to resume that job, run it "
                     "with --job-id job-a") != std::string::npos);
  }
}
