// An elastic job of 128 real processes under edl-run (issue 25, label "scale"): the synthetic worker
// (testing/elastic_worker.cc) trains through the shard generator; one worker is killed with kill -9
// once the job trains at 128, edl-run restarts its slot after a 3 s cooldown and the newcomer joins
// (at a batch boundary of the 127 survivors, or in the recovery's own rendezvous when that took
// longer than the cooldown).
// The job must finish with every worker holding identical parameters and the whole step history,
// every record trained exactly once, and no healthy worker evicted. Kept near a minute on 2 cores.
#include <catch2/catch.hpp>

#include <signal.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "launcher/run_util.h"

using namespace std::chrono_literals;
using edl::test::Launch;

namespace {

int64_t reference_hist(int64_t steps) {
  uint64_t h = 0;
  for (int64_t s = 1; s <= steps; ++s) h = h * 1000003u + static_cast<uint64_t>(s);
  return static_cast<int64_t>(h);
}

// The worker log's lines of one kind, split into words (testing/elastic_worker.cc).
std::vector<std::vector<std::string>> log_lines(const std::string& path, const std::string& kind) {
  std::vector<std::vector<std::string>> out;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    std::istringstream is(line);
    std::vector<std::string> w;
    for (std::string x; is >> x;) w.push_back(x);
    if (!w.empty() && w[0] == kind) out.push_back(std::move(w));
  }
  return out;
}

}  // namespace

TEST_CASE("edl-run elastic: 128 processes, a kill -9 and a join: identical parameters, every record once",
          "[scale]") {
  const int n = 128;
  const uint64_t records = 128 * 4 * 30;  // ~30 steps at 128 workers (4 records per worker per step)
  char tmpl[] = "/tmp/edl_scale_test_XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string log = std::string(tmpl) + "/workers.log";
  Launch run({"--hostname", "t", "--min-np", std::to_string(n - 1), "--max-np", std::to_string(n), "-np",
              std::to_string(n), "--blacklist-cooldown-range", "3,3", "--pid-file", "pids", EDL_TEST_ELASTIC_WORKER,
              "--steps", "100000", "--step-ms", "20", "--params", "256", "--records", std::to_string(records), "--log",
              log},
             {"EDL_LOG_LEVEL=0"});
  auto trained_at = [&](int size) {
    for (const auto& s : log_lines(log, "step"))
      if (std::stoi(s[5]) == size) return true;
    return false;
  };
  REQUIRE(run.wait_for([&](const std::string&, const std::string&) { return trained_at(n); }, 120s));
  auto pids = run.worker_pids();
  REQUIRE(pids.count(7));
  REQUIRE(::kill(pids[7], SIGKILL) == 0);
  auto r = run.wait(180s);
  INFO(r.err.substr(r.err.size() > 6000 ? r.err.size() - 6000 : 0));
  CHECK(r.code == 0);

  // The kill and the join: slot 7's first worker left the job, its replacement is in the last generation.
  std::set<std::string> members_last;
  uint64_t last_gen = 0;
  bool shrunk = false;
  for (const auto& g : log_lines(log, "gen")) {
    const uint64_t gen = std::stoull(g[2]);
    shrunk = shrunk || std::stoi(g[4]) == n - 1;
    if (gen > last_gen) {
      last_gen = gen;
      members_last.clear();
    }
    if (gen == last_gen) members_last.insert(g[1]);
  }
  INFO("a generation of " << n - 1 << " trained between the kill and the join: " << (shrunk ? "yes" : "no"));
  CHECK(r.err.find("left=t:7.0") != std::string::npos);
  CHECK(members_last.count("t:7.1") == 1);
  CHECK(members_last.count("t:7.0") == 0);
  CHECK(members_last.size() == static_cast<size_t>(n));
  // No healthy worker was evicted: the only member that ever left a generation is the killed one.
  for (const auto& line : edl::test::lines_of(r.err)) {
    auto p = line.find(" left=");
    if (line.find("event=generation") == std::string::npos || p == std::string::npos) continue;
    CHECK(line.substr(p + 6, line.find(' ', p + 6) - p - 6) == "t:7.0");
  }
  CHECK(edl::test::count_of(r.err, "event=evict") == 0);

  // Identical parameters and the whole step history everywhere; every record trained exactly once.
  auto done = log_lines(log, "done");
  CHECK(done.size() == static_cast<size_t>(n));
  std::set<std::string> finals;
  for (const auto& d : done) finals.insert(d[2] + " " + d[3] + " " + d[4]);
  REQUIRE(finals.size() == 1);
  const int64_t steps = std::stoll(done[0][2]);
  CHECK(done[0][4] == std::to_string(reference_hist(steps)));
  auto audits = log_lines(log, "audit");
  CHECK(audits.size() == done.size());
  for (const auto& a : audits) {
    CHECK(a[2] == std::to_string(records));
    CHECK(a[3] == std::to_string(records));
  }
  std::remove(log.c_str());
  ::rmdir(tmpl);
}
