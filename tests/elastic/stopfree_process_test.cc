// Stop-free joins of real processes (EDL_JOIN=stopfree; the synthetic worker with --records, so the
// shard generator's exactly-once audit runs too): a newcomer receives the state from the survivors'
// state servers in chunks over many batches (EDL_JOIN_MAX_CHUNK_BYTES) while the job trains on. After
// a plain join, a kill -9 of a survivor serving a slice during the fetch, and a kill -9 of the
// newcomer during the fetch, every finisher holds the same parameters (CRC), the same step history,
// and every record was trained exactly once.
#include "proc_job.h"

using namespace edl::elastic::proc_test;

namespace {

const std::map<std::string, std::string> kStopFree = {{"EDL_JOIN", "stopfree"}, {"EDL_JOIN_MAX_CHUNK_BYTES", "512"}};
const std::vector<std::string> kRecords = {"--records", "768"};  // 768 records, 4 per worker per step

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The finishers agree bitwise, hold the same history, and trained every record once.
void check_finishers(ProcJob& job, const std::set<std::string>& finishers) {
  REQUIRE(job.wait_for([&] { return job.audits.size() >= finishers.size(); }, 5s));
  const auto& first = job.done[*finishers.begin()];
  for (const auto& id : finishers) {
    INFO("worker " << id);
    REQUIRE(job.done.count(id));
    CHECK(job.done[id].step == first.step);
    CHECK(job.done[id].crc == first.crc);
    CHECK(job.done[id].hist == std::to_string(process_reference_hist(first.step)));
    REQUIRE(job.audits.count(id));
    CHECK(job.audits[id].first == 768);  // every record trained exactly once
    CHECK(job.audits[id].second == 768);
    CHECK(job.exit_status(id, 10s) == 0);
  }
  CHECK(job.errors.empty());
}

// Whether `id` logged "catchup 1" (started receiving the state) and not yet "catchup 0".
bool catching_up(ProcJob& job, const std::string& id) {
  bool on = false;
  for (const auto& c : job.catchups)
    if (c.worker == id) on = c.on == 1;
  return on;
}

// When `id` logged "catchup 0" (CLOCK_MONOTONIC ms), -1 if it did not.
double caught_up_at(ProcJob& job, const std::string& id) {
  double t = -1;
  for (const auto& c : job.catchups)
    if (c.worker == id && c.on == 0) t = c.t;
  return t;
}

}  // namespace

TEST_CASE("processes, stop-free: a newcomer catches up in the background, same parameters, records once",
          "[process][stopfree][join]") {
  ProcJob job("psf_join", 1000);
  job.spawn("a", 2, 3, "process-test-secret", kStopFree, kRecords);
  job.spawn("b", 2, 3, "process-test-secret", kStopFree, kRecords);
  REQUIRE(job.wait_for([&] { return job.max_step() >= 10; }, 20s));
  job.spawn("c", 2, 3, "process-test-secret", kStopFree, kRecords);
  REQUIRE(job.wait_for([&] { return caught_up_at(job, "c") > 0; }, 30s));
  int64_t started = -1, caught = -1;
  for (const auto& c : job.catchups) (c.on ? started : caught) = c.step;
  CHECK(caught - started >= 5);  // 16 KiB + 3 KiB of tensors in chunks of 512 bytes: many batches
  REQUIRE(job.wait_for([&] { return job.done.size() == 3; }, 60s));
  check_finishers(job, {"a", "b", "c"});
}

TEST_CASE("processes, stop-free: kill -9 of a survivor serving a slice during the fetch", "[process][stopfree][kill]") {
  ProcJob job("psf_kill_source", 1000);
  for (const char* id : {"a", "b", "c"}) job.spawn(id, 2, 4, "process-test-secret", kStopFree, kRecords);
  REQUIRE(job.wait_for([&] { return job.max_step() >= 10; }, 20s));
  job.spawn("d", 2, 4, "process-test-secret", kStopFree, kRecords);
  REQUIRE(job.wait_for([&] { return catching_up(job, "d"); }, 30s));
  const double kill_t = now_ms();
  REQUIRE(job.signal("b", SIGKILL) == 0);
  CHECK(job.exit_status("b", 5s) == 128 + SIGKILL);
  REQUIRE(job.wait_for([&] { return caught_up_at(job, "d") > 0; }, 30s));
  CHECK(caught_up_at(job, "d") > kill_t);  // the kill hit while d was still receiving the state
  REQUIRE(job.wait_for([&] { return job.done.size() == 3; }, 60s));
  check_finishers(job, {"a", "c", "d"});
}

TEST_CASE("processes, stop-free: kill -9 of the newcomer during the fetch", "[process][stopfree][kill]") {
  ProcJob job("psf_kill_newcomer", 1000);
  job.spawn("a", 2, 3, "process-test-secret", kStopFree, kRecords);
  job.spawn("b", 2, 3, "process-test-secret", kStopFree, kRecords);
  REQUIRE(job.wait_for([&] { return job.max_step() >= 10; }, 20s));
  job.spawn("c", 2, 3, "process-test-secret", kStopFree, kRecords);
  REQUIRE(job.wait_for([&] { return catching_up(job, "c"); }, 30s));
  REQUIRE(job.signal("c", SIGKILL) == 0);
  CHECK(job.exit_status("c", 5s) == 128 + SIGKILL);
  CHECK(caught_up_at(job, "c") < 0);  // it died before it held the state
  REQUIRE(job.wait_for([&] { return job.done.size() == 2; }, 60s));
  check_finishers(job, {"a", "b"});
}
