// testing/commit_log: parsing multihost_worker's and elastic_worker's lines and the control-plane measures, on
// hand-written logs (no namespaces needed).
#include <catch2/catch.hpp>

#include <string>

#include "testing/commit_log.h"

using edl::testing::CommitLog;

namespace {

// "commit <worker> <host> <step> <gen> <rank> <size> <crc> <mono> <wall>"
std::string commit(const std::string& w, const std::string& h, int step, int gen, unsigned crc, double t) {
  return "commit " + w + " " + h + " " + std::to_string(step) + " " + std::to_string(gen) + " 0 3 " +
         std::to_string(crc) + " " + std::to_string(t) + " 1700000000000.000\n";
}

}  // namespace

TEST_CASE("commit log lines parse, other and torn lines are skipped", "[multihost]") {
  std::string text = "start host0:0.0 host0 4711 10.5 1700000000000.0\n" + commit("host0:0.0", "host0", 1, 1, 42, 11) +
                     "gen host0:0.0 host0 1 0 3 9.0 1.0\n"
                     "error host2:0.0 host2 20.25 1700000000001.0 store redis://10.77.0.4:6379: timed out\n"
                     "done host0:0.0 host0 7 99 30.0 1.0\n"
                     "commit host1:0.0 host1 2 1";  // torn
  CommitLog l = CommitLog::parse(text);
  REQUIRE(l.commits.size() == 1);
  CHECK(l.commits[0].worker == "host0:0.0");
  CHECK(l.commits[0].crc == 42u);
  CHECK(l.commits[0].mono_ms == Approx(11));
  REQUIRE(l.ends.size() == 2);
  CHECK(l.ends[0].error);
  CHECK(l.ends[0].message == "store redis://10.77.0.4:6379: timed out");
  CHECK(l.ends[0].mono_ms == Approx(20.25));
  CHECK_FALSE(l.ends[1].error);
  CHECK(l.ends[1].step == 7);
  CHECK(l.ends[1].crc == 99u);
  const auto* e = edl::testing::first_error_of_host(l, "host2", 0);
  REQUIRE(e);
  CHECK(e->worker == "host2:0.0");
  CHECK(edl::testing::first_error_of_host(l, "host2", 21) == nullptr);
}

TEST_CASE("pause is the longest commit gap from the last commit before the fault", "[multihost]") {
  std::string text;
  for (int s = 1; s <= 5; ++s) text += commit("a", "h0", s, 1, s, 100.0 * s);  // 100..500
  text += commit("a", "h0", 6, 2, 6, 2500) + commit("a", "h0", 7, 2, 7, 2600) + commit("a", "h0", 8, 2, 8, 9000);
  CommitLog l = CommitLog::parse(text);
  CHECK(edl::testing::pause_ms(l, 550, 2600) == Approx(2000));  // 500 -> 2500
  CHECK(edl::testing::pause_ms(l, 550, 2550) == Approx(2000));
  CHECK(edl::testing::pause_ms(l, 550, 9000) == Approx(6400));  // 2600 -> 9000 is longer
  CHECK(edl::testing::pause_ms(l, 50, 2600) < 0);               // nothing before the fault
  CHECK(edl::testing::pause_ms(l, 550, 560) < 0);               // nothing after it
  CHECK(edl::testing::commits_after(l, 550) == 3);
  CHECK(edl::testing::last_step_of_host(l, "h0", 550) == 8);
  CHECK(edl::testing::last_step_of_host(l, "h1", 0) == -1);
}

TEST_CASE("rolled-back steps count as lost", "[multihost]") {
  // Generation 1 commits 1..5; generation 2 restarts from 3 (4 and 5 were rolled back).
  std::string text;
  for (int s = 1; s <= 5; ++s) text += commit("a", "h0", s, 1, s, s);
  for (int s = 4; s <= 7; ++s) text += commit("a", "h0", s, 2, s, 10 + s);
  CommitLog l = CommitLog::parse(text);
  CHECK(edl::testing::lost_steps(l) == 2);
  CHECK(edl::testing::split_brain_steps(l) == 0);  // one after the other: no overlap
}

TEST_CASE("split brain: an old generation committing after a newer one, or members disagreeing", "[multihost]") {
  SECTION("clean") {
    std::string text = commit("a", "h0", 1, 1, 7, 1) + commit("b", "h1", 1, 1, 7, 1.5) + commit("a", "h0", 2, 2, 8, 5);
    CHECK(edl::testing::split_brain_steps(CommitLog::parse(text)) == 0);
  }
  SECTION("two generations train at once") {
    std::string text = commit("a", "h0", 10, 2, 1, 100) +  // generation 2 is training ...
                       commit("c", "h2", 10, 1, 2, 101) +  // ... while the cut-off generation 1 commits
                       commit("c", "h2", 11, 1, 3, 102) + commit("a", "h0", 11, 2, 4, 103);
    CHECK(edl::testing::split_brain_steps(CommitLog::parse(text)) == 2);
  }
  SECTION("members of one generation disagree") {
    std::string text = commit("a", "h0", 3, 1, 7, 1) + commit("b", "h1", 3, 1, 9, 1.1) + commit("b", "h1", 4, 1, 9, 2);
    CHECK(edl::testing::split_brain_steps(CommitLog::parse(text)) == 1);
  }
}

TEST_CASE("elastic_worker's log reads into the same terms, torn lines skipped", "[multihost]") {
  std::string text = "start n0:0.0 4711 1.5\n"
                     "gen n0:0.0 2 1 3 2 0 100.5 12.0\n"
                     "gen n2:0.1 3 0 2 3 1 200.5 300.0\n"
                     "step n0:0.0 5 2 1 3 101.25\n"
                     "done n0:0.0 5 77 " + std::to_string(edl::testing::reference_hist(5)) + "\n"
                     "audit n0:0.0 12 12\n"
                     "error n1:0.0 elastic: reset limit of 3 reached\n"
                     "step n1:0.0 6 2";  // torn
  CommitLog l = CommitLog::parse_elastic_worker(text);
  REQUIRE(l.commits.size() == 1);
  CHECK(l.commits[0].host == "n0");
  CHECK(l.commits[0].step == 5);
  CHECK(l.commits[0].generation == 2u);
  CHECK(l.commits[0].size == 3);
  CHECK(l.commits[0].mono_ms == Approx(101.25));
  REQUIRE(l.generations.size() == 2);
  CHECK_FALSE(l.generations[0].after_failure);
  CHECK(l.generations[1].after_failure);
  CHECK(l.generations[1].host == "n2");
  CHECK(l.generations[1].previous_size == 3);
  REQUIRE(l.ends.size() == 2);
  CHECK(l.ends[0].crc == 77u);
  CHECK(l.ends[1].error);
  CHECK(l.ends[1].message == "elastic: reset limit of 3 reached");
  REQUIRE(l.audits.size() == 1);
  CHECK(l.audits[0].once == 12u);
}

TEST_CASE("exactly_once: one final step and CRC, every step once, every record once", "[multihost]") {
  auto done = [](const std::string& w, int step, unsigned crc, int64_t hist) {
    return "done " + w + " " + std::to_string(step) + " " + std::to_string(crc) + " " + std::to_string(hist) + "\n";
  };
  const int64_t h9 = edl::testing::reference_hist(9);
  std::string good = done("a:0.0", 9, 5, h9) + "audit a:0.0 40 40\n" + done("b:0.0", 9, 5, h9) + "audit b:0.0 40 40\n" +
                     done("c:0.0", 4, 3, edl::testing::reference_hist(4)) + "audit c:0.0 16 40\n";  // c left early
  CHECK(edl::testing::exactly_once(CommitLog::parse_elastic_worker(good), {"a:0.0", "b:0.0"}, 40) == "");
  // b holds other parameters.
  std::string crc = done("a:0.0", 9, 5, h9) + done("b:0.0", 9, 6, h9);
  CHECK(edl::testing::exactly_once(CommitLog::parse_elastic_worker(crc), {"a:0.0", "b:0.0"}, 0).find("crc") !=
        std::string::npos);
  // a step applied twice (the history of another step count).
  std::string hist = done("a:0.0", 9, 5, edl::testing::reference_hist(10));
  CHECK(edl::testing::exactly_once(CommitLog::parse_elastic_worker(hist), {"a:0.0"}, 0).find("every step once") !=
        std::string::npos);
  // a record trained twice or never.
  std::string data = done("a:0.0", 9, 5, h9) + "audit a:0.0 39 40\n";
  CHECK(edl::testing::exactly_once(CommitLog::parse_elastic_worker(data), {"a:0.0"}, 40).find("39 of 40") !=
        std::string::npos);
  // a finisher that never logged done.
  CHECK(edl::testing::exactly_once(CommitLog::parse_elastic_worker(good), {"a:0.0", "z:0.0"}, 40).find("z:0.0") !=
        std::string::npos);
}
