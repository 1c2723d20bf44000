// Stop-free joins under edl-run (EDL_JOIN=stopfree, docs/elastic.md "Stop-free joins"): a worker of
// a real elastic job of the synthetic worker (testing/elastic_worker.cc, --records: the exactly-once
// data audit) is killed with kill -9; edl-run restarts its slot, and the new incarnation joins stop-free:
// it receives the state from the survivors' state servers in chunks over several batches while they
// train on. The job ends with every record trained exactly once, every step applied once and the
// same parameters on every finisher (testing/commit_log.h, exactly_once()).
#include <catch2/catch.hpp>

#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "launcher/run_util.h"
#include "testing/commit_log.h"

using namespace std::chrono_literals;
using edl::test::Launch;
using edl::test::lines_of;
using edl::test::read_file;
using edl::testing::CommitLog;

namespace {

const std::string kWorker = EDL_TEST_ELASTIC_WORKER;

// The steps of the "catchup <worker> <0|1> <step> <t>" lines of `worker`: first = started (1),
// second = caught up (0); -1 where the line is missing.
std::pair<int64_t, int64_t> catchup_steps(const std::string& log, const std::string& worker) {
  std::pair<int64_t, int64_t> r{-1, -1};
  for (const auto& line : lines_of(log)) {
    std::istringstream in(line);
    std::string kind, w;
    int on = 0;
    int64_t step = 0;
    if (!(in >> kind >> w >> on >> step) || kind != "catchup" || w != worker) continue;
    (on ? r.first : r.second) = step;
  }
  return r;
}

}  // namespace

TEST_CASE("edl-run elastic, stop-free: a killed worker's replacement catches up in the background, records once",
          "[launcher][elastic][stopfree]") {
  char tmpl[] = "/tmp/edl-stopfree-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  const std::string log = dir + "/steps.log";
  // 16 KiB of parameters and 3 KiB of record counters in chunks of at most 1 KiB: several batches.
  Launch l({"--hostname", "t", "--min-np", "2", "--max-np", "3", "-np", "3", "--pid-file", "pids",
            "--grace-period", "5", kWorker, "--steps", "100000", "--step-ms", "30", "--params", "4096", "--records",
            "768", "--log", log},
           {"EDL_JOIN=stopfree", "EDL_JOIN_MAX_CHUNK_BYTES=1024"});
  auto max_step = [&] {
    int64_t m = 0;
    for (const auto& c : CommitLog::parse_elastic_worker(read_file(log)).commits) m = std::max(m, c.step);
    return m;
  };
  REQUIRE(l.wait_for([&](const std::string&, const std::string&) { return max_step() >= 5; }, 60s));
  const auto pids = l.worker_pids();
  REQUIRE(pids.size() == 3);
  REQUIRE(kill(pids.at(1), SIGKILL) == 0);
  auto r = l.wait(120s);
  const std::string text = read_file(log);
  INFO(r.err << "\n--- worker log ---\n" << text);
  CHECK(r.code == 0);
  CHECK(r.err.find("event=failed slot=1") != std::string::npos);
  // The replacement (slot 1, incarnation 1) joined stop-free: it received the state over several
  // batches, and trained records once it held it (the audit below counts its records).
  const auto [started, caught] = catchup_steps(text, "t:1.1");
  CHECK(started > 0);
  CHECK(caught - started >= 2);
  const auto parsed = CommitLog::parse_elastic_worker(text);
  CHECK(edl::testing::exactly_once(parsed, {"t:0.0", "t:1.1", "t:2.0"}, 768) == "");
  std::filesystem::remove_all(dir);
}
