// edl-run under hostile conditions (issues 12 and 13): one edl-run per host and any of them may die,
// a worker reporting a non-retryable error, a stopped-then-evicted worker, a worker flooding stdout.
// Real edl-run binaries on the helper worker program; "hosts" are edl-run processes with
// --hostname hostA / hostB on this machine.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "launcher/run_util.h"
#include "testing/redis_server.h"

using namespace std::chrono_literals;
using edl::test::count_of;
using edl::test::Launch;
using edl::test::lines_of;

namespace {

const std::string kHelper = EDL_LAUNCHER_HELPER;

// "CHECKSUM" of every "[tag] done STEPS CHECKSUM" line.
std::set<std::string> finals_of(const std::vector<const std::string*>& outs, int* count) {
  std::set<std::string> finals;
  *count = 0;
  for (const auto* out : outs)
    for (const auto& line : lines_of(*out)) {
      auto p = line.find("] done ");
      if (p == std::string::npos) continue;
      finals.insert(line.substr(p + 7));
      ++*count;
    }
  return finals;
}

// Worker ids listed after `field` ("joined=" / "left=") in the generation lines of an event log.
std::multiset<std::string> ids_in(const std::string& err, const std::string& field) {
  std::multiset<std::string> ids;
  for (const auto& line : lines_of(err)) {
    if (line.find("event=generation") == std::string::npos) continue;
    auto p = line.find(" " + field);
    if (p == std::string::npos) continue;
    std::string list = line.substr(p + 1 + field.size());
    list = list.substr(0, list.find(' '));
    std::stringstream ss(list);
    std::string id;
    while (std::getline(ss, id, ',')) ids.insert(id);
  }
  return ids;
}

bool redis_or_skip(const edl::testing::RedisServer& r) {
  if (r.available()) return true;
  const char* req = std::getenv("EDL_REQUIRE_DEPS");
  if (req && std::string(req) == "1") FAIL("redis-server is not installed (EDL_REQUIRE_DEPS=1)");
  WARN("redis-server is not installed: skipping");
  return false;
}

}  // namespace

TEST_CASE("edl-run multi-host: kill -9 of one host's edl-run, its workers exit, the rest train on, a restart rejoins",
          "[launcher][elastic][redis][hostile]") {
  edl::testing::RedisServer redis("job-pw");
  if (!redis_or_skip(redis)) return;
  const std::string job = "kill-host-" + std::to_string(getpid());
  auto args = [&](const std::string& host, int np) {
    // hostA runs each worker under /bin/sh: the trainer is sh's child, without PR_SET_PDEATHSIG,
    // so only the inherited EDL_LAUNCHER_FD can end it when edl-run dies.
    std::vector<std::string> a = {"--store", redis.url(), "--secret", "job-pw", "--job-id", job, "--min-np", "1",
                                  "--max-np", "3", "--hostname", host, "-np", std::to_string(np), "--grace-period", "3"};
    if (host == "hostA") {
      for (std::string x : {std::string("/bin/sh"), std::string("-c"), kHelper + " elastic-train 300 20; exit $?"})
        a.push_back(x);
    } else {
      for (std::string x : {kHelper, std::string("elastic-train"), std::string("300"), std::string("20")})
        a.push_back(x);
    }
    return a;
  };
  const std::vector<std::string> env = {"EDL_LEASE_MS=1500", "EDL_HEARTBEAT_MS=250"};
  Launch b(args("hostB", 1), env);
  auto a1 = std::make_unique<Launch>(args("hostA", 2), env);
  REQUIRE(b.wait_for([](const std::string&, const std::string& err) { return err.find("size=3") != std::string::npos; },
                     60s));
  const std::vector<std::string> host_a = {"EDL_JOB_ID=" + job, "EDL_HOSTNAME=hostA"};
  REQUIRE(edl::test::processes_with_env(host_a).size() >= 2);  // 2 shells + 2 trainers
  a1->kill_launcher();
  // No orphans: every process of hostA's workers (the shells and the trainers under them) ends.
  CHECK(edl::test::wait_processes_gone(host_a, 20s));
  // hostB's worker trains on in a generation without hostA.
  REQUIRE(b.wait_for([](const std::string&, const std::string& err) { return err.find("size=1") != std::string::npos; },
                     30s));
  // An edl-run restarted on hostA brings its slots back (new incarnations: the old ids stay dead).
  Launch a2(args("hostA", 2), env);
  auto ra = a2.wait(120s);
  auto rb = b.wait(120s);
  INFO(rb.err << ra.err);
  CHECK(ra.code == 0);
  CHECK(rb.code == 0);
  auto left = ids_in(rb.err, "left="), joined = ids_in(rb.err, "joined=");
  CHECK(left.count("hostA:0.0") == 1);
  CHECK(left.count("hostA:1.0") == 1);
  CHECK(joined.count("hostA:0.1") == 1);
  CHECK(joined.count("hostA:1.1") == 1);
  CHECK(ra.err.find("worker=hostA:0.1") != std::string::npos);
  int n = 0;
  auto finals = finals_of({&ra.out, &rb.out}, &n);
  CHECK(n == 3);
  CHECK(finals.size() == 1);  // every worker ends with the same parameters
  CHECK(count_of(rb.out, "] done 300 ") == 1);
}

TEST_CASE("edl-run multi-host, embedded store: the death of the hosting edl-run fails the others, naming the store",
          "[launcher][elastic][hostile]") {
  const int port = edl::test::free_port();
  const std::string job = "embedded-" + std::to_string(getpid());
  const std::string url = "tcp://127.0.0.1:" + std::to_string(port);
  auto args = [&](const std::string& host, bool hosts_store) {
    std::vector<std::string> a = {"--secret", "s3", "--job-id", job, "--min-np", "1", "--max-np", "2",
                                  "--hostname", host, "-np", "1", "--grace-period", "2"};
    for (std::string x : hosts_store ? std::vector<std::string>{"--store-port", std::to_string(port)}
                                     : std::vector<std::string>{"--store", url})
      a.push_back(x);
    for (std::string x : {kHelper, std::string("elastic-train"), std::string("100000"), std::string("20")})
      a.push_back(x);
    return a;
  };
  Launch a(args("hostA", true));
  REQUIRE(a.wait_for([](const std::string&, const std::string& err) { return err.find("event=job") != std::string::npos; },
                     30s));
  Launch b(args("hostB", false), {"EDL_STORE_TIMEOUT_MS=2000"});
  REQUIRE(b.wait_for([](const std::string&, const std::string& err) { return err.find("size=2") != std::string::npos; },
                     60s));
  a.kill_launcher();
  auto rb = b.wait(90s);
  INFO(rb.err);
  CHECK(rb.code != 0);
  CHECK(rb.code != -1);  // it exited by itself
  CHECK(rb.err.find("event=job-failed") != std::string::npos);
  CHECK(rb.err.find("the store " + url + " has been unreachable for more than 2000 ms") != std::string::npos);
  CHECK(edl::test::wait_processes_gone({"EDL_JOB_ID=" + job}, 20s));
}

TEST_CASE("edl-run elastic: a non-retryable worker error fails the job at once with that reason",
          "[launcher][elastic][hostile]") {
  std::vector<std::string> base = {"--min-np", "1", "--max-np", "2", "-np", "2", "--grace-period", "3"};
  std::vector<std::string> prog = {kHelper, "elastic-train", "100000", "20", "--user-error-at-step", "5"};
  std::vector<std::string> a = base;
  a.insert(a.end(), prog.begin(), prog.end());
  auto r = edl::test::run_edl(a, 60s);
  INFO(r.err);
  CHECK(r.code == 3);
  CHECK(r.err.find("event=job-failed code=3 reason=\"") != std::string::npos);
  CHECK(r.err.find("ValueError in user code at step 5: bad label 11") != std::string::npos);
  CHECK(count_of(r.err, "event=started") == 2);  // never restarted
  // Opted into retries: the failure is an ordinary one, restarted (here until --reset-limit).
  std::vector<std::string> retry = {"--retry-user-errors", "--reset-limit", "1"};
  retry.insert(retry.end(), base.begin(), base.end());
  retry.insert(retry.end(), prog.begin(), prog.end());
  auto rr = edl::test::run_edl(retry, 90s);
  INFO(rr.err);
  CHECK(count_of(rr.err, "event=started") >= 3);
  CHECK(rr.err.find("restarts=1/1") != std::string::npos);
}

namespace {

// The stopped-worker jobs: 3 workers of elastic-train STEPS (20 ms each) with --grace-period GRACE.
std::vector<std::string> stopped_job_args(const std::string& grace, const std::string& steps) {
  return {"--min-np", "1", "--max-np", "3", "-np", "3", "--pid-file", "pids", "--grace-period", grace, kHelper,
          "elastic-train", steps, "20"};
}

// Waits for the generation of 3, then SIGSTOPs the worker of slot 2; returns its pid.
pid_t stop_slot_2(Launch& l) {
  REQUIRE(l.wait_for([](const std::string&, const std::string& err) { return err.find("size=3") != std::string::npos; },
                     60s));
  const auto pids = l.worker_pids();
  REQUIRE(pids.size() == 3);
  const pid_t victim = pids.at(2);
  REQUIRE(kill(victim, SIGSTOP) == 0);
  return victim;
}

}  // namespace

TEST_CASE("edl-run elastic: a stopped-then-evicted worker does not hold edl-run open after training finished",
          "[launcher][elastic][hostile]") {
  Launch l(stopped_job_args("1", "120"), {"EDL_LEASE_MS=1000", "EDL_HEARTBEAT_MS=200"});
  const pid_t victim = stop_slot_2(l);
  auto r = l.wait(90s);
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.err.find("event=evict slot=2") != std::string::npos);
  // The stopped worker is ended (left out of the membership for --grace-period, or at the end); its
  // slot may be restarted meanwhile, so the survivors and possibly a replacement finish.
  CHECK(count_of(r.out, "] done 120 ") >= 2);
  CHECK(kill(victim, 0) != 0);  // ended and reaped by edl-run
}

// Issue 22, item 2: a stopped worker that a generation leaves out is ended as soon as edl-run sees that
// generation (the decider's reason at <job>/g<G>/dropped/<w>), not after --grace-period; its slot is
// restarted and the job finishes.
TEST_CASE("edl-run elastic: a SIGSTOPped worker is ended as soon as a generation leaves it out",
          "[launcher][elastic][hostile]") {
  Launch l(stopped_job_args("30", "400"), {"EDL_LEASE_MS=1000", "EDL_HEARTBEAT_MS=200"});
  const pid_t victim = stop_slot_2(l);
  // The grace period is 30 s: an eviction within 20 s can only be the at-once one.
  const bool evicted = l.wait_for(
      [](const std::string&, const std::string& err) { return err.find("event=evict slot=2") != std::string::npos; },
      20s);
  if (!evicted) kill(victim, SIGCONT);  // let the job end normally; the checks below fail
  CHECK(evicted);
  auto r = l.wait(120s);
  INFO(r.err);
  CHECK(r.code == 0);
  std::smatch m;
  REQUIRE(std::regex_search(r.err, m, std::regex("event=evict slot=2 worker=[^ ]+ gen=[0-9]+ reason=\"([^\"]*)\"")));
  CHECK_THAT(m[1].str(), Catch::StartsWith("dead"));  // the decider's record: its lease or its beats stopped
  CHECK(r.err.find("still running after --grace-period") == std::string::npos);
  CHECK(count_of(r.err, "event=started slot=2") == 2);  // the slot was started again
  CHECK(kill(victim, 0) != 0);                          // ended and reaped by edl-run
}

// The other side of issue 22, item 2 (docs/elastic.md, SIGSTOP row): a stop shorter than EDL_LEASE_MS
// (and the collective deadline) is only a pause — no generation leaves the worker out, edl-run ends
// nothing, and the same three workers finish with the same parameters.
TEST_CASE("edl-run elastic: a worker SIGSTOPped for less than the lease is only paused",
          "[launcher][elastic][hostile]") {
  Launch l(stopped_job_args("5", "200"), {"EDL_LEASE_MS=6000", "EDL_HEARTBEAT_MS=200"});
  const pid_t victim = stop_slot_2(l);
  std::this_thread::sleep_for(1s);
  REQUIRE(kill(victim, SIGCONT) == 0);
  auto r = l.wait(120s);
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.err.find("event=evict") == std::string::npos);
  CHECK(r.err.find("event=generation gen=2") == std::string::npos);  // generation 1 trained to the end
  CHECK(count_of(r.err, "event=started slot=2") == 1);
  int done = 0;
  CHECK(finals_of({&r.out}, &done).size() == 1);  // the same parameters on every worker
  CHECK(done == 3);
  CHECK(count_of(r.out, "] done 200 ") == 3);
}

TEST_CASE("edl-run: a worker printing 200 MB while training causes no eviction", "[launcher][elastic][hostile]") {
  auto r = edl::test::run_edl({"--min-np", "2", "-np", "2", "--grace-period", "3", kHelper, "elastic-train", "100",
                               "20", "--print-mb", "100"},
                              240s);
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(count_of(r.out, "] done 100 ") == 2);
  CHECK(r.err.find("left=") == std::string::npos);  // no generation lost a worker
  CHECK(count_of(r.err, "event=generation") == 1);
  // Every line arrived whole or was dropped and counted.
  size_t printed = count_of(r.out, "] " + std::string(1023, 'p') + "\n");
  size_t dropped = 0;
  std::smatch m;
  if (std::regex_search(r.err, m, std::regex("event=output-dropped fd=1 lines=([0-9]+)"))) dropped = std::stoul(m[1]);
  CHECK(printed + dropped == 2 * 100 * 1024);
}

TEST_CASE("edl-run: a stalled stdout drops worker lines (counted) instead of blocking", "[launcher][hostile]") {
  // edl-run's stdout is a pipe nobody reads: the writer thread blocks on it, the worker's lines are
  // dropped once 8 MiB are queued, and edl-run still sees the worker finish and exits.
  Launch l({"-np", "1", "--grace-period", "2", kHelper, "lines", "60000"}, {}, /*stall_stdout=*/true);
  auto r = l.wait(120s);
  INFO(r.err.substr(0, 2000));
  CHECK(r.code == 0);
  CHECK(r.err.find("output to fd 1 is slower than the workers write") != std::string::npos);
  std::smatch m;
  REQUIRE(std::regex_search(r.err, m, std::regex("event=output-dropped fd=1 lines=([0-9]+) bytes=([0-9]+)")));
  CHECK(std::stoul(m[1]) > 0);
  // stderr was not stalled: every stderr line arrived.
  CHECK(count_of(r.err, " end\n") == 60000);
}

TEST_CASE("edl-run stays responsive while a worker floods its stdout", "[launcher][hostile]") {
  Launch l({"-np", "2", "--grace-period", "2", kHelper, "flood"});
  const std::string out_path = l.dir() + "/out";
  auto out_size = [&] {
    std::error_code ec;
    auto n = std::filesystem::file_size(out_path, ec);
    return ec ? 0 : n;
  };
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (out_size() < (8u << 20) && std::chrono::steady_clock::now() < deadline) usleep(20000);
  REQUIRE(out_size() >= (8u << 20));
  REQUIRE(kill(l.pid(), SIGTERM) == 0);
  auto r = l.wait(60s);
  CHECK(r.code == 128 + SIGTERM);
  CHECK(r.err.find("received Terminated; forwarding it to the workers") != std::string::npos);
}

TEST_CASE("edl-run elastic: the runtime's SIGTERM handler is SA_RESTART and the program's own is restored at shutdown",
          "[launcher][elastic]") {
  auto r = edl::test::run_edl({"--min-np", "1", "-np", "1", kHelper, "elastic-train", "5", "1", "--own-sigterm-handler"},
                              60s);
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(count_of(r.out, "sigterm handler during the job: the runtime's, SA_RESTART on") == 1);
  CHECK(count_of(r.out, "sigterm handler restored") == 1);
}

TEST_CASE("edl-run elastic: --reset-limit counts resets as the workers do and is passed to them", "[launcher][elastic]") {
  // A join is a reset: with --reset-limit 0 the generation it forms fails the job.
  char tmpl[] = "/tmp/edl-reset-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl, slots = dir + "/slots";
  std::ofstream(slots) << "localhost:2\n";
  Launch l({"--min-np", "2", "--max-np", "3", "--reset-limit", "0", "--host-discovery-script", "cat " + slots,
            "--discovery-interval-ms", "100", "--grace-period", "2", kHelper, "elastic-train", "100000", "10"});
  REQUIRE(l.wait_for([](const std::string&, const std::string& err) { return err.find("size=2") != std::string::npos; },
                     60s));
  std::ofstream(slots) << "localhost:3\n";
  auto r = l.wait(90s);
  std::filesystem::remove_all(dir);
  INFO(r.err);
  CHECK(r.code == 1);
  CHECK(r.err.find("event=job-failed code=1 reason=\"reset limit of 0 reached (--reset-limit)") != std::string::npos);
  // The workers get the same limit.
  auto env = edl::test::run_edl({"--min-np", "1", "-np", "1", "--reset-limit", "4", kHelper, "env"}, 30s);
  CHECK(env.out.find("EDL_RESET_LIMIT=4") != std::string::npos);
}

TEST_CASE("edl-run elastic: a hanging discovery script does not block the loop", "[launcher][elastic][hostile]") {
  char tmpl[] = "/tmp/edl-disc-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  std::ofstream(dir + "/slots") << "localhost:1\n";
  const std::string script = "cat " + dir + "/slots; if [ -f " + dir + "/hang ]; then sleep 30; fi";
  Launch l({"--min-np", "1", "--host-discovery-script", script, "--discovery-interval-ms", "50", "--grace-period", "2",
            kHelper, "sleep-ms", "60000"});
  REQUIRE(l.wait_for([](const std::string&, const std::string& err) { return err.find("event=started") != std::string::npos; },
                     30s));
  std::ofstream(dir + "/hang") << "1\n";
  usleep(500 * 1000);  // several intervals: a run of the script is hanging now
  REQUIRE(kill(l.pid(), SIGTERM) == 0);
  auto r = l.wait(60s);
  std::filesystem::remove_all(dir);
  INFO(r.err);
  CHECK(r.code == 128 + SIGTERM);
  // The signal was acted on while the script hung: a loop blocked in the script would first have
  // logged its 10 s timeout ("discovery-failed").
  auto sig = r.err.find("event=signal");
  REQUIRE(sig != std::string::npos);
  CHECK(r.err.find("event=discovery-failed") == std::string::npos);
  CHECK(r.err.find("event=left slot=0") != std::string::npos);
}

TEST_CASE("edl-run elastic: opt-in flags reach the workers as EDL_* variables, and only then", "[launcher][elastic]") {
  auto on = edl::test::run_edl({"--min-np", "1", "-np", "1", "--retry-user-errors", "--allow-restart-from-scratch",
                                kHelper, "env"},
                               30s);
  CHECK(on.code == 0);
  CHECK(on.out.find("EDL_RETRY_USER_ERRORS=1") != std::string::npos);
  CHECK(on.out.find("EDL_ALLOW_RESTART_FROM_SCRATCH=1") != std::string::npos);
  CHECK(on.out.find("EDL_LAUNCHER_FD=") != std::string::npos);
  // Set in edl-run's own environment but not asked for on its command line: removed.
  auto off = edl::test::run_edl({"--min-np", "1", "-np", "1", kHelper, "env"}, 30s,
                                {"EDL_RETRY_USER_ERRORS=1", "EDL_ALLOW_RESTART_FROM_SCRATCH=1", "EDL_RESET_LIMIT=9"});
  CHECK(off.code == 0);
  CHECK(off.out.find("EDL_RETRY_USER_ERRORS") == std::string::npos);
  CHECK(off.out.find("EDL_ALLOW_RESTART_FROM_SCRATCH") == std::string::npos);
  CHECK(off.out.find("EDL_RESET_LIMIT") == std::string::npos);
}
