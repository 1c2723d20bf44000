// edl-run end to end: the real binary on the helper program (launcher_helper.cc).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>
#include <set>

#include "launcher/binding.h"
#include "launcher/discovery.h"
#include "launcher/options.h"
#include "launcher/parse_util.h"
#include "launcher/run_util.h"
#include "testing/redis_server.h"
#include "testing/require_dep.h"

using namespace std::chrono_literals;
using edl::test::count_of;
using edl::test::Launch;
using edl::test::lines_of;
using edl::test::run_edl;

namespace {

const std::string kHelper = EDL_LAUNCHER_HELPER;

// "[tag] NAME=value" lines -> tag -> NAME -> value.
std::map<std::string, std::map<std::string, std::string>> env_by_tag(const std::string& out) {
  std::map<std::string, std::map<std::string, std::string>> m;
  std::regex re(R"(^\[([^\]]+)\] (EDL_[A-Z_]+)=(.*)$)");
  for (const auto& line : lines_of(out)) {
    std::smatch sm;
    if (std::regex_match(line, sm, re)) m[sm[1]][sm[2]] = sm[3];
  }
  return m;
}

edl::launcher::LaunchOptions parse(std::vector<std::string> args) {
  auto o = edl::test::parse_launch_options(std::move(args));
  REQUIRE(o);
  return *o;
}

bool parse_fails(std::vector<std::string> args) { return !edl::test::parse_launch_options(std::move(args)); }

}  // namespace

TEST_CASE("edl-run options: PROGRAM and its own flags are passed through", "[launcher]") {
  auto o = parse({"-np", "3", "prog", "--np", "9", "-x"});
  CHECK(o.np == 3);
  CHECK_FALSE(o.elastic);
  CHECK(o.command == std::vector<std::string>{"prog", "--np", "9", "-x"});
  o = parse({"--np=2", "--grace-period", "1.5", "--", "-weird-name"});
  CHECK(o.np == 2);
  CHECK(o.grace_period_s == 1.5);
  CHECK(o.command == std::vector<std::string>{"-weird-name"});
  o = parse({"--min-np", "2", "--max-np", "4", "-np", "3", "--blacklist-cooldown-range", "2,8", "p"});
  CHECK(o.elastic);
  CHECK(o.min_np == 2);
  CHECK(o.max_np == 4);
  CHECK(o.cooldown_min_s == 2);
  CHECK(o.cooldown_max_s == 8);
  CHECK(o.reset_limit == -1);
  CHECK(parse_fails({"-np", "0", "p"}));
  CHECK(parse_fails({"-np", "x", "p"}));
  CHECK(parse_fails({"-np", "2"}));
  CHECK(parse_fails({"p"}));
  CHECK(parse_fails({"--bogus", "-np", "1", "p"}));
  CHECK(parse_fails({"--min-np", "3", "--max-np", "2", "-np", "2", "p"}));
  CHECK(parse_fails({"--min-np", "1", "-np", "5", "--max-np", "4", "p"}));
  CHECK(parse_fails({"--elastic", "-np", "1", "--blacklist-cooldown-range", "5", "p"}));
  CHECK(parse_fails({"--elastic", "-np", "1", "--blacklist-cooldown-range", "5,2", "p"}));
  CHECK(parse({"--elastic", "-np", "1", "--reset-limit", "-1", "p"}).reset_limit == -1);  // unlimited, as the default
  CHECK(parse({"--elastic", "-np", "1", "--reset-limit", "0", "p"}).reset_limit == 0);    // no reset at all
  CHECK(parse_fails({"--elastic", "-np", "1", "--reset-limit", "-2", "p"}));
  CHECK(parse_fails({"-np", "1", "--store", "http://x:1", "p"}));
  CHECK(parse_fails({"-np"}));
  CHECK(parse_fails({"-np", "1", "--hostname", "bad host", "p"}));
  CHECK(parse_fails({"-np", "1", "--hostname", "a:b", "p"}));
  CHECK(parse_fails({"-np", "1", "--job-id", "a/b", "p"}));
}

TEST_CASE("edl-run discovery output parsing", "[launcher]") {
  auto d = edl::launcher::parse_discovery("# hosts\nlocalhost:2\n\n  node-7:4 \nbare\nlocalhost:1\n");
  REQUIRE(d.ok);
  CHECK(d.hosts["localhost"] == 3);
  CHECK(d.hosts["node-7"] == 4);
  CHECK(d.hosts["bare"] == 1);
  CHECK(edl::launcher::local_slots(d, "myhost") == 3);
  CHECK(edl::launcher::local_slots(d, "node-7") == 7);
  CHECK_FALSE(edl::launcher::parse_discovery("host:two\n").ok);
  CHECK_FALSE(edl::launcher::parse_discovery(":3\n").ok);
  auto failed = edl::launcher::run_discovery("exit 3", 2000);
  CHECK_FALSE(failed.ok);
  CHECK(failed.error.find("3") != std::string::npos);
  auto slow = edl::launcher::run_discovery("sleep 5", 200);
  CHECK_FALSE(slow.ok);
  CHECK(slow.error.find("timed out") != std::string::npos);
  auto ok = edl::launcher::run_discovery("echo localhost:2", 2000);
  CHECK(ok.ok);
  CHECK(ok.hosts["localhost"] == 2);
}

TEST_CASE("edl-run: bad flags exit 2 with the usage", "[launcher]") {
  for (auto args : std::vector<std::vector<std::string>>{{"--bogus", "-np", "1", kHelper, "env"},
                                                         {"-np", "0", kHelper, "env"},
                                                         {"-np", "many", kHelper, "env"},
                                                         {"-np", "2"},
                                                         {"--min-np", "3", "--max-np", "2", kHelper}}) {
    auto r = run_edl(args, 10s);
    CHECK(r.code == 2);
    CHECK(r.err.find("edl-run: error:") != std::string::npos);
    CHECK(r.err.find("Usage:") != std::string::npos);
  }
  auto help = run_edl({"--help"}, 10s);
  CHECK(help.code == 0);
  CHECK(help.out.find("--host-discovery-script") != std::string::npos);
  auto missing = run_edl({"-np", "1", "/no/such/program"}, 10s);
  CHECK(missing.code == 127);
  CHECK(missing.err.find("/no/such/program") != std::string::npos);
}

TEST_CASE("edl-run: workers get the environment init() reads, output is rank-prefixed", "[launcher]") {
  auto r = run_edl({"-np", "3", "--job-id", "jobA", kHelper, "env"}, 20s);
  REQUIRE(r.code == 0);
  auto env = env_by_tag(r.out);
  REQUIRE(env.size() == 3);
  std::set<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    auto& e = env[std::to_string(i)];
    CHECK(e["EDL_RANK"] == std::to_string(i));
    CHECK(e["EDL_SIZE"] == "3");
    CHECK(e["EDL_LOCAL_RANK"] == std::to_string(i));
    CHECK(e["EDL_LOCAL_SIZE"] == "3");
    CHECK(e["EDL_JOB_ID"] == "jobA");
    CHECK(e["EDL_STORE"].rfind("tcp://127.0.0.1:", 0) == 0);
    CHECK(e["EDL_STORE"] == env["0"]["EDL_STORE"]);
    CHECK(e["EDL_JOB_SECRET"].size() >= 16);
    CHECK(e["EDL_JOB_SECRET"] == env["0"]["EDL_JOB_SECRET"]);
    CHECK(e.count("EDL_ELASTIC") == 0);
    ids.insert(e["EDL_WORKER_ID"]);
  }
  CHECK(ids.size() == 3);
  // The secret comes from --secret, else EDL_JOB_SECRET, else it is random per job.
  auto given = run_edl({"-np", "1", "--secret", "s1", kHelper, "env"}, 20s);
  CHECK(env_by_tag(given.out)["0"]["EDL_JOB_SECRET"] == "s1");
  auto from_env = run_edl({"-np", "1", kHelper, "env"}, 20s, {"EDL_JOB_SECRET=s2"});
  CHECK(env_by_tag(from_env.out)["0"]["EDL_JOB_SECRET"] == "s2");
  auto other = run_edl({"-np", "1", kHelper, "env"}, 20s);
  CHECK(env_by_tag(other.out)["0"]["EDL_JOB_SECRET"] != env["0"]["EDL_JOB_SECRET"]);
}

TEST_CASE("edl-run --bind-to: which CPUs each worker slot gets", "[launcher]") {
  using edl::launcher::cpus_for_slot;
  const std::vector<int> four{0, 1, 2, 3};
  CHECK(cpus_for_slot("auto", 0, 2, four) == std::vector<int>{0, 1});
  CHECK(cpus_for_slot("auto", 1, 2, four) == std::vector<int>{2, 3});
  CHECK(cpus_for_slot("core", 2, 3, four) == std::vector<int>{2});  // 4 / 3 = 1 CPU each, CPU 3 unused
  CHECK(cpus_for_slot("auto", 0, 5, four).empty());                   // more slots than CPUs: not bound
  CHECK_THROWS_WITH(cpus_for_slot("core", 0, 5, four), Catch::Contains("5 worker slots but only 4 CPUs"));
  CHECK(cpus_for_slot("none", 0, 2, four).empty());
  CHECK(cpus_for_slot("auto", 0, 0, four).empty());  // elastic without --max-np: no fixed slot count
  CHECK(cpus_for_slot("auto", 1, 2, std::vector<int>{4, 6}) == std::vector<int>{6});  // an affinity mask with gaps
  CHECK_THROWS_WITH(cpus_for_slot("cores", 0, 1, four), Catch::Contains("none, core or auto"));
  CHECK(edl::launcher::cpu_list_text({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8");
}

TEST_CASE("edl-run --bind-to: workers run on the CPUs of their slot", "[launcher]") {
  const std::vector<int> cpus = edl::launcher::allowed_cpus();
  if (cpus.size() < 2) {
    WARN("only " << cpus.size() << " CPU available: binding of 2 workers not checked");
    return;
  }
  const std::string show = "grep Cpus_allowed_list /proc/self/status";
  auto bound = run_edl({"--bind-to", "core", "-np", "2", "sh", "-c", show}, 20s);
  REQUIRE(bound.code == 0);
  const size_t k = cpus.size() / 2;
  auto list = [&](size_t from) { return edl::launcher::cpu_list_text(std::vector<int>(cpus.begin() + from, cpus.begin() + from + k)); };
  CHECK_THAT(bound.out, Catch::Contains("[0] Cpus_allowed_list:\t" + list(0) + "\n"));
  CHECK_THAT(bound.out, Catch::Contains("[1] Cpus_allowed_list:\t" + list(k) + "\n"));
  auto all = edl::launcher::cpu_list_text(cpus);
  auto none = run_edl({"--bind-to", "none", "-np", "2", "sh", "-c", show}, 20s);
  REQUIRE(none.code == 0);
  CHECK_THAT(none.out, Catch::Contains("[0] Cpus_allowed_list:\t" + all + "\n"));
  CHECK_THAT(none.out, Catch::Contains("[1] Cpus_allowed_list:\t" + all + "\n"));
  // More slots than CPUs: auto leaves them unbound, core is a usage error.
  const std::string many = std::to_string(cpus.size() + 1);
  auto over = run_edl({"-np", many, "sh", "-c", show}, 20s);
  REQUIRE(over.code == 0);
  CHECK_THAT(over.out, Catch::Contains("[0] Cpus_allowed_list:\t" + all + "\n"));
  auto refused = run_edl({"--bind-to", "core", "-np", many, "true"}, 20s);
  CHECK(refused.code == 2);
  CHECK_THAT(refused.err, Catch::Contains("--bind-to core"));
}

TEST_CASE("edl-run: lines of different workers never interleave", "[launcher]") {
  auto r = run_edl({"-np", "3", kHelper, "lines", "300"}, 30s);
  REQUIRE(r.code == 0);
  std::regex re(R"(^\[[0-2]\] line [0-9]+ x{200} end$)");
  for (const auto* text : {&r.out, &r.err}) {
    auto lines = lines_of(*text);
    CHECK(lines.size() == 900);
    size_t bad = 0;
    for (const auto& l : lines) bad += std::regex_match(l, re) ? 0 : 1;
    CHECK(bad == 0);
  }
}

TEST_CASE("edl-run: workers reach each other through the embedded store", "[launcher]") {
  auto r = run_edl({"-np", "4", kHelper, "store-barrier"}, 30s);
  CHECK(r.code == 0);
  CHECK(count_of(r.out, "barrier passed by 4 ranks") == 4);
}

TEST_CASE("edl-run: the first non-zero exit code propagates and the others are stopped", "[launcher]") {
  auto t0 = std::chrono::steady_clock::now();
  auto r = run_edl({"-np", "3", kHelper, "exit-rank", "1", "7"}, 30s);
  CHECK(r.code == 7);
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  CHECK(r.err.find("rank 1") != std::string::npos);
  CHECK(r.err.find("exited with code 7") != std::string::npos);
  CHECK(count_of(r.out, "got signal 15") == 2);  // ranks 0 and 2 got SIGTERM
}

TEST_CASE("edl-run: SIGINT and SIGTERM are forwarded to every worker", "[launcher]") {
  for (int sig : {SIGINT, SIGTERM}) {
    Launch l({"-np", "2", "--pid-file", "pids", kHelper, "wait-signal", "5"});
    REQUIRE(l.wait_for([](const std::string& out, const std::string&) { return count_of(out, "ready") == 2; }, 20s));
    kill(l.pid(), sig);
    auto r = l.wait(20s);
    CHECK(r.code == 5);  // the workers' own exit code
    CHECK(count_of(r.out, "got signal " + std::to_string(sig)) == 2);
  }
}

TEST_CASE("edl-run: workers ignoring SIGTERM are killed after the grace period", "[launcher]") {
  Launch l({"-np", "2", "--grace-period", "0.3", "--pid-file", "pids", kHelper, "ignore-term"});
  REQUIRE(l.wait_for([](const std::string& out, const std::string&) { return count_of(out, "ready") == 2; }, 20s));
  const auto pids = l.worker_pids();
  CHECK(pids.size() == 2);
  auto t0 = std::chrono::steady_clock::now();
  kill(l.pid(), SIGTERM);
  auto r = l.wait(20s);
  CHECK(r.code == 128 + SIGKILL);
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  CHECK(r.err.find("SIGKILL") != std::string::npos);
  for (const auto& [slot, p] : pids) {  // nothing left behind
    INFO("slot " << slot);
    CHECK(kill(p, 0) != 0);
  }
}

// --- elastic mode ---------------------------------------------------------------------------------

TEST_CASE("edl-run elastic: worker environment", "[launcher][elastic]") {
  auto r = run_edl({"--min-np", "1", "--max-np", "3", "-np", "1", "--hostname", "hostA", kHelper, "env"}, 20s);
  REQUIRE(r.code == 0);
  auto env = env_by_tag(r.out);
  REQUIRE(env.count("hostA:0.0") == 1);
  auto& e = env["hostA:0.0"];
  CHECK(e["EDL_ELASTIC"] == "1");
  CHECK(e["EDL_MIN_NP"] == "1");
  CHECK(e["EDL_MAX_NP"] == "3");
  CHECK(e["EDL_WORKER_ID"] == "hostA:0.0");
  CHECK(e.count("EDL_RANK") == 0);
  CHECK(e.count("EDL_SIZE") == 0);
  CHECK(e["EDL_STORE"].rfind("tcp://", 0) == 0);
}

TEST_CASE("edl-run elastic: failed workers are restarted within --reset-limit", "[launcher][elastic]") {
  // Incarnation 0 and 1 fail with 5, incarnation 2 succeeds: two restarts needed.
  auto ok = run_edl({"--min-np", "1", "-np", "1", "--reset-limit", "2", kHelper, "incarnation-exit", "5", "5", "0"},
                    30s);
  CHECK(ok.code == 0);
  CHECK(count_of(ok.err, "event=started") == 3);
  CHECK(count_of(ok.err, "event=failed") == 2);
  CHECK(count_of(ok.out, "incarnation 2 exits with 0") == 1);
  // One restart allowed: the second failure fails the job with the worker's code.
  auto fail = run_edl({"--min-np", "1", "-np", "1", "--reset-limit", "1", kHelper, "incarnation-exit", "5", "5", "0"},
                      30s);
  CHECK(fail.code == 5);
  CHECK(count_of(fail.err, "event=started") == 2);
  CHECK(fail.err.find("reset limit reached") != std::string::npos);
}

TEST_CASE("edl-run elastic: a failed slot rests for the blacklist cooldown, growing exponentially",
          "[launcher][elastic]") {
  auto r = run_edl({"--min-np", "1", "-np", "1", "--reset-limit", "3", "--blacklist-cooldown-range", "1,2", kHelper,
                    "incarnation-exit", "5", "5", "0"},
                   30s);
  CHECK(r.code == 0);
  CHECK(r.err.find("cooldown_ms=1000") != std::string::npos);
  CHECK(r.err.find("cooldown_ms=2000") != std::string::npos);
  // The restart times in the event log honour the cooldowns.
  std::map<std::string, double> started, failed;
  std::regex re(R"(t=([0-9.]+) event=(started|failed) slot=0 worker=[^ ]+:0\.([0-9]+))");
  for (const auto& line : lines_of(r.err)) {
    std::smatch m;
    if (std::regex_search(line, m, re)) (m[2] == "started" ? started : failed)[m[3]] = std::stod(m[1]);
  }
  REQUIRE(started.size() == 3);
  REQUIRE(failed.size() == 2);
  CHECK(started["1"] - failed["0"] >= 0.95);
  CHECK(started["2"] - failed["1"] >= 1.95);
}

TEST_CASE("edl-run elastic: the discovery script adds and removes local slots", "[launcher][elastic]") {
  char tmpl[] = "/tmp/edl-disc-XXXXXX";
  REQUIRE(mkdtemp(tmpl));
  std::string dir = tmpl, hosts = dir + "/hosts";
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);  // also when a REQUIRE failed
    }
  } cleanup{dir};
  auto write_hosts = [&](const std::string& text) {
    std::ofstream(hosts + ".tmp") << text;
    std::rename((hosts + ".tmp").c_str(), hosts.c_str());
  };
  write_hosts("localhost:1\nremote-node:4\n");
  {
    Launch l({"--min-np", "1", "--max-np", "4", "--host-discovery-script", "cat " + hosts, "--discovery-interval-ms",
              "100", "--grace-period", "2", kHelper, "sleep-ms", "30000"});
    auto has = [&](const std::string& s, size_t n) {
      return l.wait_for([&](const std::string&, const std::string& err) { return count_of(err, s) >= n; }, 20s);
    };
    REQUIRE(has("event=started slot=0", 1));
    CHECK(l.err().find("remote-node:4") != std::string::npos);
    write_hosts("localhost:3\nremote-node:4\n");
    REQUIRE(has("event=started slot=2", 1));
    CHECK(count_of(l.err(), "event=started slot=1") == 1);
    write_hosts("localhost:1\n");
    REQUIRE(has("event=left slot=2", 1));
    REQUIRE(has("event=left slot=1", 1));
    CHECK(count_of(l.err(), "event=left slot=0") == 0);
    CHECK(count_of(l.err(), "event=failed") == 0);
    // A broken discovery output is reported once and keeps the current slots.
    write_hosts("localhost:two\n");
    REQUIRE(has("event=discovery-failed", 1));
    std::this_thread::sleep_for(500ms);
    CHECK(count_of(l.err(), "event=discovery-failed") == 1);
    CHECK(count_of(l.err(), "event=left slot=0") == 0);
    kill(l.pid(), SIGTERM);
    auto r = l.wait(20s);
    CHECK(r.code == 128 + SIGTERM);
    CHECK(count_of(r.err, "event=left slot=0") == 1);
  }
}

// Issue 22, item 4 (docs/launcher.md, "Growing a one-host job"): `-np 2 --max-np 3` runs 2 workers;
// a third comes from a discovery script (with -np, which then only sets --min-np's default) or from
// a second edl-run on the first one's embedded store.
TEST_CASE("edl-run elastic: a third worker joins a one-host job started with -np 2 --max-np 3", "[launcher][elastic]") {
  auto done_lines = [](const std::string& out) {
    std::set<std::string> finals;
    for (const auto& line : lines_of(out)) {
      auto p = line.find("] done ");
      if (p != std::string::npos) finals.insert(line.substr(p + 2));
    }
    return finals;
  };
  SECTION("a discovery script") {
    char tmpl[] = "/tmp/edl-grow-XXXXXX";
    REQUIRE(mkdtemp(tmpl));
    const std::string dir = tmpl, slots = dir + "/slots";
    struct Cleanup {
      std::string dir;
      ~Cleanup() {
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
      }
    } cleanup{dir};
    std::ofstream(slots) << "localhost:2\n";
    Launch l({"-np", "2", "--max-np", "3", "--host-discovery-script", "cat " + slots, "--discovery-interval-ms", "100",
              "--grace-period", "3", kHelper, "elastic-train", "400", "20"});
    REQUIRE(l.wait_for([](const std::string&, const std::string& err) { return err.find("size=2") != std::string::npos; },
                       60s));
    CHECK(l.err().find("min_np=2 max_np=3") != std::string::npos);  // -np 2 set --min-np's default
    std::ofstream(slots + ".tmp") << "localhost:3\n";
    std::rename((slots + ".tmp").c_str(), slots.c_str());
    auto r = l.wait(120s);
    INFO(r.err);
    CHECK(r.code == 0);
    CHECK(r.err.find("event=started slot=2") != std::string::npos);
    CHECK(r.err.find("size=3") != std::string::npos);
    CHECK(count_of(r.out, "] done 400 ") == 3);
    CHECK(done_lines(r.out).size() == 1);  // the same parameters on every worker
  }
  SECTION("a second edl-run on the first one's embedded store") {
    const std::vector<std::string> job = {"--secret", "grow-secret", "--job-id", "grow1", "--min-np", "2", "--max-np", "3"};
    std::vector<std::string> first = job;
    for (std::string a : {"-np", "2", "--grace-period", "3", kHelper.c_str(), "elastic-train", "400", "20"})
      first.push_back(a);
    Launch a(first);
    std::smatch m;
    REQUIRE(a.wait_for(
        [&](const std::string&, const std::string& err) {
          return std::regex_search(err, m, std::regex("event=job job=grow1 store=(tcp://[^ ]+)")) &&
                 err.find("size=2") != std::string::npos;
        },
        60s));
    const std::string url = m[1];
    std::vector<std::string> second = job;
    for (std::string x : {"--store", url.c_str(), "-np", "1", "--grace-period", "3", kHelper.c_str(), "elastic-train",
                          "400", "20"})
      second.push_back(x);
    Launch b(second);
    auto rb = b.wait(120s);
    auto ra = a.wait(120s);
    INFO(ra.err << rb.err);
    CHECK(ra.code == 0);
    CHECK(rb.code == 0);
    CHECK(ra.err.find("size=3") != std::string::npos);
    CHECK(rb.err.find(":0.1 pid=") != std::string::npos);  // the same host's slot 0, incarnation 1: a new id
    CHECK(count_of(ra.out, "] done 400 ") == 2);
    CHECK(count_of(rb.out, "] done 400 ") == 1);
    std::set<std::string> all = done_lines(ra.out);
    for (const auto& d : done_lines(rb.out)) all.insert(d);
    CHECK(all.size() == 1);
  }
}

TEST_CASE("edl-run elastic: fewer than --min-np live workers past the timeout fails the job", "[launcher][elastic]") {
  // The helper never joins the store, so no worker is live from the launcher's point of view.
  auto r = run_edl({"--min-np", "2", "-np", "2", "--rendezvous-timeout", "0.5", "--grace-period", "2", kHelper,
                    "sleep-ms", "20000"},
                   30s);
  CHECK(r.code == 1);
  CHECK(r.err.find("fewer than --min-np 2") != std::string::npos);
}

TEST_CASE("edl-run elastic: a killed worker of a real elastic job is replaced and training completes",
          "[launcher][elastic]") {
  Launch l({"--min-np", "2", "--max-np", "3", "-np", "3", "--pid-file", "pids", "--grace-period", "3", kHelper,
            "elastic-train", "150", "10"});
  REQUIRE(l.wait_for([](const std::string&, const std::string& err) { return count_of(err, "event=generation") >= 1; },
                     30s));
  const auto pids = l.worker_pids();
  REQUIRE(pids.size() == 3);
  const pid_t victim = pids.at(1);
  REQUIRE(kill(victim, SIGKILL) == 0);
  auto r = l.wait(60s);
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(count_of(r.err, "event=failed slot=1") == 1);
  CHECK(r.err.find(":1.1 pid=") != std::string::npos);  // slot 1 restarted as incarnation 1
  CHECK(r.err.find("recover_ms=") != std::string::npos);
  // Every worker that finished holds the same parameters.
  std::set<std::string> finals;
  for (const auto& line : lines_of(r.out)) {
    auto p = line.find("] done ");
    if (p != std::string::npos) finals.insert(line.substr(p + 2));
  }
  CHECK(finals.size() == 1);
  CHECK(count_of(r.out, "] done 150 ") >= 2);
}

TEST_CASE("edl-run elastic: two launchers on one redis store form one job", "[launcher][elastic][redis]") {
  edl::testing::RedisServer redis("job-pw");
  if (!edl::testing::require_dep("redis-server", redis.available(), "Debian package redis-server")) return;
  std::vector<std::string> common = {"--store", redis.url(), "--secret", "job-pw", "--job-id", "two-hosts",
                                     "--min-np", "3", "--max-np", "3"};
  auto args = [&](const std::string& host, int np) {
    std::vector<std::string> a = common;
    for (std::string x : {std::string("--hostname"), host, std::string("-np"), std::to_string(np), kHelper,
                          std::string("elastic-train"), std::string("60"), std::string("10")})
      a.push_back(x);
    return a;
  };
  Launch a(args("hostA", 2));
  Launch b(args("hostB", 1));
  auto ra = a.wait(60s);
  auto rb = b.wait(60s);
  INFO(ra.err << rb.err);
  CHECK(ra.code == 0);
  CHECK(rb.code == 0);
  // Both launchers saw the same 3-worker generation with members from both hosts.
  for (const auto* err : {&ra.err, &rb.err}) {
    CHECK(err->find("size=3") != std::string::npos);
    CHECK(err->find("hostA:0.0") != std::string::npos);
    CHECK(err->find("hostB:0.0") != std::string::npos);
  }
  std::set<std::string> finals;
  for (const auto* out : {&ra.out, &rb.out})
    for (const auto& line : lines_of(*out)) {
      auto p = line.find("] done ");
      if (p != std::string::npos) finals.insert(line.substr(p + 2));
    }
  CHECK(finals.size() == 1);
  CHECK(count_of(ra.out, "] done 60 ") == 2);
  CHECK(count_of(rb.out, "] done 60 ") == 1);
}

TEST_CASE("edl-run: kill -9 of edl-run leaves no shared-memory segment of the job", "[launcher][shm]") {
  auto shm_names = [] {
    std::set<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) names.insert(e.path().filename());
    return names;
  };
  const auto before = shm_names();
  const std::string job = "shm-kill-" + std::to_string(getpid());
  Launch l({"--job-id", job, "-np", "2", kHelper, "shm-allreduce"}, {"EDL_TRANSPORT=auto"});
  REQUIRE(l.wait_for([](const std::string& out, const std::string&) { return count_of(out, "segment ") >= 2; }, 30s));
  CHECK(count_of(l.out(), "segment mapped") == 2);  // the workers really use shared memory
  CHECK(shm_names() == before);                     // and it has no name
  l.kill_launcher();
  CHECK(edl::test::wait_processes_gone({"EDL_JOB_ID=" + job}, 20s));  // the workers notice and exit
  CHECK(shm_names() == before);
}

TEST_CASE("edl-run --gpus-per-host / --one-gpu-test: parsing and each slot's GPU environment", "[launcher][gpu-slots]") {
  auto o = parse({"--gpus-per-host", "4", "-np", "2", "prog"});
  CHECK(o.gpus_per_host == 4);
  CHECK_FALSE(o.one_gpu_test);
  CHECK(parse({"--one-gpu-test", "-np", "2", "prog"}).one_gpu_test);
  CHECK(parse_fails({"--gpus-per-host", "0", "-np", "2", "prog"}));
  CHECK(parse_fails({"--gpus-per-host", "2", "--one-gpu-test", "-np", "2", "prog"}));
  auto env_of = [](const edl::launcher::LaunchOptions& opt, int slot, std::vector<std::string> env) {
    edl::launcher::set_gpu_env(&env, opt, slot);
    std::sort(env.begin(), env.end());
    return env;
  };
  using V = std::vector<std::string>;
  edl::launcher::LaunchOptions none;
  CHECK(env_of(none, 3, {"A=1", "CUDA_VISIBLE_DEVICES=5"}) == V{"A=1", "CUDA_VISIBLE_DEVICES=5"});  // untouched
  edl::launcher::LaunchOptions per;
  per.gpus_per_host = 2;
  CHECK(env_of(per, 3, {"A=1"}) == V{"A=1", "CUDA_VISIBLE_DEVICES=1"});
  CHECK(env_of(per, 1, {"CUDA_VISIBLE_DEVICES=4,6,7"}) == V{"CUDA_VISIBLE_DEVICES=6"});  // edl-run's own list
  CHECK_THROWS_AS(env_of(per, 0, {"CUDA_VISIBLE_DEVICES=4"}), edl::launcher::UsageError);
  edl::launcher::LaunchOptions one;
  one.one_gpu_test = true;
  one.hostname = "h1";
  CHECK(env_of(one, 2, {"CUDA_VISIBLE_DEVICES=3", "NCCL_HOSTID=x"}) ==
        V{"CUDA_VISIBLE_DEVICES=0", "NCCL_HOSTID=h1-slot2"});
}

TEST_CASE("edl-run --one-gpu-test / --gpus-per-host: what the workers see", "[launcher][gpu-slots]") {
  const std::string show = "echo \"gpu=$CUDA_VISIBLE_DEVICES host=$NCCL_HOSTID\"";
  auto one = run_edl({"--one-gpu-test", "--hostname", "hx", "-np", "2", "sh", "-c", show}, 20s);
  REQUIRE(one.code == 0);
  CHECK_THAT(one.out, Catch::Contains("[0] gpu=0 host=hx-slot0\n"));
  CHECK_THAT(one.out, Catch::Contains("[1] gpu=0 host=hx-slot1\n"));
  auto per = run_edl({"--gpus-per-host", "2", "-np", "3", "sh", "-c", show}, 20s, {"CUDA_VISIBLE_DEVICES="});
  REQUIRE(per.code == 0);
  CHECK_THAT(per.out, Catch::Contains("[1] gpu=1 host="));
  CHECK_THAT(per.out, Catch::Contains("[2] gpu=0 host="));
  auto elastic = run_edl({"--one-gpu-test", "--hostname", "hy", "--min-np", "1", "--max-np", "2", "-np", "2", "sh",
                          "-c", show},
                         20s);
  CHECK_THAT(elastic.out, Catch::Contains("gpu=0 host=hy-slot1\n"));
}
