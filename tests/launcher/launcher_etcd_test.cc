// edl-run --store etcd://...: a real elastic job whose control plane is a 3-member etcd cluster, and
// the etcd leader is killed while the job trains.
#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "launcher/run_util.h"
#include "testing/etcd_cluster.h"
#include "testing/require_dep.h"

using namespace std::chrono_literals;
using edl::test::count_of;
using edl::test::Launch;
using edl::test::lines_of;

TEST_CASE("edl-run elastic on a 3-member etcd cluster survives the etcd leader being killed mid-training",
          "[launcher][elastic][etcd]") {
  edl::testing::EtcdCluster etcd(3);
  if (!edl::testing::require_dep("etcd", etcd.available(), "Debian package etcd-server")) return;
  Launch l({"--store", etcd.url(), "--job-id", "etcd-job", "--min-np", "2", "--max-np", "2", "-np", "2",
            EDL_LAUNCHER_HELPER, "elastic-train", "400", "10"});
  REQUIRE(l.wait_for([](const std::string&, const std::string& err) { return count_of(err, "event=generation") >= 1; },
                     60s));
  // Training runs for about 4 s from here: the kill lands in the middle of it.
  CHECK(count_of(l.out(), "] done ") == 0);
  etcd.kill(etcd.leader());
  auto r = l.wait(120s);
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.err.find("store=" + etcd.url()) != std::string::npos);
  // Both workers finished every step with the same parameters.
  std::set<std::string> finals;
  for (const auto& line : lines_of(r.out)) {
    auto p = line.find("] done ");
    if (p != std::string::npos) finals.insert(line.substr(p + 2));
  }
  CHECK(finals.size() == 1);
  CHECK(count_of(r.out, "] done 400 ") == 2);
}
