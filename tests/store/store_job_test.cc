// A whole job (the real edl-run and the real elastic runtime in worker processes) against a store
// under faults: a redis:// store restarted from its append-only file within EDL_STORE_TIMEOUT_MS
// (the job goes on); one gone for good (edl-run exits non-zero naming it within the window); the
// embedded tcp:// store flooded by a hostile process (the job finishes, edl-run's memory bounded).
#include <catch2/catch.hpp>
#include <chrono>
#include <set>
#include <thread>

#include "launcher/run_util.h"
#include "store/hostile_client.h"
#include "testing/redis_server.h"

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

std::vector<std::string> job_args(const edl::testing::RedisServer& redis, const std::string& job, int steps) {
  return {"--store", redis.url(), "--secret", "pw", "--job-id", job, "--min-np", "2", "--max-np", "2", "-np", "2",
          EDL_LAUNCHER_HELPER, "elastic-train", std::to_string(steps), "10"};
}

bool trained(const std::string& out, const std::string&) { return out.find("] done") != std::string::npos; }

bool generation_formed(const std::string&, const std::string& err) {
  return err.find("event=generation") != std::string::npos;
}

// The "done STEP CHECKSUM" lines of the workers (one distinct line = every rank agrees).
std::set<std::string> finals(const std::string& out) {
  std::set<std::string> f;
  for (const auto& line : edl::test::lines_of(out)) {
    auto p = line.find("] done ");
    if (p != std::string::npos) f.insert(line.substr(p + 2));
  }
  return f;
}

}  // namespace

TEST_CASE("store outage: redis kill -9 and restart from its AOF, the edl-run job goes on", "[store][redis][outage]") {
  edl::testing::RedisServer redis("pw", /*appendonly=*/true);
  if (!redis.available()) {
    WARN("redis-server is not installed: skipping");
    return;
  }
  edl::test::Launch job(job_args(redis, "outage-restart", 600), {"EDL_STORE_TIMEOUT_MS=30000"});
  REQUIRE(job.wait_for(generation_formed, 60s));
  std::this_thread::sleep_for(1s);  // training under way
  redis.kill();
  std::this_thread::sleep_for(1s);
  redis.restart();
  auto r = job.wait(120s);
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(edl::test::count_of(r.err, "reconnected") >= 1);  // the outage was seen and survived
  CHECK(finals(r.out).size() == 1);  // both ranks end with the same step and model checksum
  CHECK(trained(r.out, r.err));
}

TEST_CASE("store outage: redis gone past EDL_STORE_TIMEOUT_MS, edl-run exits non-zero naming the store",
          "[store][redis][outage]") {
  edl::testing::RedisServer redis("pw");
  if (!redis.available()) {
    WARN("redis-server is not installed: skipping");
    return;
  }
  edl::test::Launch job(job_args(redis, "outage-gone", 1000000), {"EDL_STORE_TIMEOUT_MS=2000"});
  REQUIRE(job.wait_for(generation_formed, 60s));
  redis.kill();
  auto t0 = Clock::now();
  auto r = job.wait(60s);
  auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  INFO(r.err);
  CHECK(r.code == 1);
  CHECK(r.err.find("reason=\"the store " + redis.url() + " has been unreachable for more than") != std::string::npos);
  CHECK(r.err.find("EDL_STORE_TIMEOUT_MS") != std::string::npos);
  CHECK(edl::test::count_of(r.err, "event=started") == 2);  // no restart loop: nobody was started again
  CHECK(elapsed >= 1900);
  CHECK(elapsed < 30000);  // the 2 s window + worker shutdown (grace period) + slack for a loaded machine
}

TEST_CASE("store flood: an edl-run job finishes while another process floods its embedded store", "[store][hostile]") {
  // The embedded tcp:// store lives in edl-run; its URL is in the job line of the event log.
  edl::test::Launch job({"--min-np", "2", "--max-np", "2", "-np", "2", "--job-id", "flooded", EDL_LAUNCHER_HELPER,
                         "elastic-train", "400", "10"});
  REQUIRE(job.wait_for(generation_formed, 60s));
  std::string err = job.err();
  auto at = err.find("store=tcp://127.0.0.1:");
  REQUIRE(at != std::string::npos);
  int port = std::stoi(err.substr(at + std::string("store=tcp://127.0.0.1:").size()));
  long baseline = edl::test::rss_kib(job.pid());
  auto flood = edl::test::start_flood(port);
  REQUIRE(flood.pid > 0);
  long peak = baseline;
  int rounds = 0;
  while (!trained(job.out(), "")) {  // sample edl-run's memory after every round of 1,000 connections
    if (!edl::test::wait_round(flood)) break;
    ++rounds;
    peak = std::max(peak, edl::test::rss_kib(job.pid()));
  }
  edl::test::stop_flood(flood);
  auto r = job.wait(120s);
  INFO(r.err.substr(0, 4000));
  INFO("edl-run VmRSS baseline " << baseline << " KiB, peak " << peak << " KiB over " << rounds << " flood rounds");
  CHECK(r.code == 0);
  CHECK(finals(r.out).size() == 1);
  CHECK(r.out.find("] done 400 ") != std::string::npos);
  CHECK(rounds >= 1);  // at least 1,000 hostile connections while the job trained
  CHECK(baseline > 0);
  CHECK(peak - baseline < 64 * 1024);
}
