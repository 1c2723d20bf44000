// testing/netns: link parsing everywhere; as root, namespaces that carry traffic at the shaped rate and
// that are removed by the destructor, by a fatal signal, and by remove_stale() after SIGKILL.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "testing/netns.h"
#include "testing/process.h"
#include "testing/require_dep.h"

using edl::testing::LinkSpec;
using edl::testing::NetnsCluster;

namespace {

// Namespaces whose names start with edlns<pid>.
std::vector<std::string> namespaces_of(pid_t pid) {
  std::vector<std::string> out;
  std::string prefix = "edlns" + std::to_string(pid) + "-";
  if (DIR* d = opendir("/run/netns")) {
    while (dirent* e = readdir(d)) {
      if (std::string(e->d_name).rfind(prefix, 0) == 0) out.push_back(e->d_name);
    }
    closedir(d);
  }
  return out;
}

// Waits (bounded) for a forked child and returns its raw wait status.
int wait_child(pid_t pid) {
  for (int i = 0; i < 600; ++i) {  // 30 s
    int st = 0;
    if (waitpid(pid, &st, WNOHANG) == pid) return st;
    usleep(50000);
  }
  kill(pid, SIGKILL);
  int st = 0;
  waitpid(pid, &st, 0);
  FAIL("child " << pid << " did not finish within 30 s");
  return st;
}

}  // namespace

TEST_CASE("link specs parse and bad ones are named", "[netns]") {
  CHECK(edl::testing::parse_link("loopback").rate_mbit == 0);
  CHECK(edl::testing::parse_link("1gbit").rate_mbit == Approx(1000));
  CHECK(edl::testing::parse_link("10gbit").rate_mbit == Approx(10000));
  LinkSpec l = edl::testing::parse_link("100mbit+0.1ms");
  CHECK(l.rate_mbit == Approx(100));
  CHECK(l.delay_ms == Approx(0.1));
  CHECK_THROWS_WITH(edl::testing::parse_link("fast"), Catch::Contains("'fast'"));
  CHECK_THROWS_WITH(edl::testing::parse_link("1gbit+soon"), Catch::Contains("'soon'"));
  CHECK_THROWS(edl::testing::parse_link("-1gbit"));
}

TEST_CASE("emulated links carry traffic at the shaped rate and are removed afterwards", "[netns]") {
  if (!edl::testing::require_dep("network namespaces", NetnsCluster::unsupported_reason().empty(),
                                  NetnsCluster::unsupported_reason()))
    return;
  std::vector<std::string> names;
  {
    NetnsCluster c(2, edl::testing::parse_link("1gbit"));
    names = namespaces_of(getpid());
    CHECK(names.size() == 3);  // switch + 2 workers
    CHECK(c.address(1) == "10.77.0.2");
    CHECK(c.effective_label() == "1gbit");
    double gbit = edl::testing::probe_throughput_gbit(c, 0, 1, 24u << 20);
    // tbf holds the rate (an upper bound only: a loaded machine may carry less; no speed target here).
    CHECK(gbit < 1.1);
    CHECK(gbit > 0);
    CHECK(edl::testing::probe_rtt_us(c, 1, 0, 20) > 0);
  }
  CHECK(namespaces_of(getpid()).empty());
}

TEST_CASE("a fatal signal removes the namespaces, remove_stale cleans up after SIGKILL", "[netns]") {
  if (!edl::testing::require_dep("network namespaces", NetnsCluster::unsupported_reason().empty(),
                                  NetnsCluster::unsupported_reason()))
    return;
  for (int sig : {SIGTERM, SIGKILL}) {
    // The child gets the default action for SIGTERM (not the test framework's handler): it dies
    // as a bench would. It returns only if the cluster could not be built.
    edl::testing::SpawnOptions o;
    o.own_group = false;
    const pid_t pid = edl::testing::fork_call(
        [sig] {
          NetnsCluster c(2, LinkSpec{});
          raise(sig);
          return 3;
        },
        o);
    int st = wait_child(pid);
    REQUIRE(WIFSIGNALED(st));
    CHECK(WTERMSIG(st) == sig);
    if (sig == SIGTERM) {
      CHECK(namespaces_of(pid).empty());
    } else {
      // Nothing could run on SIGKILL, so the next user removes them (another process's
      // remove_stale() may already have: only the outcome is checked).
      NetnsCluster::remove_stale();
      CHECK(namespaces_of(pid).empty());
    }
  }
}
