// Liveness of a generation's members on a real etcd (docs/elastic.md, "Failure detection"): the watch
// thread reads its watched peers' leases through Store::get_many_watched, which the etcd backend
// serves from watch streams — no request per heartbeat — and a peer that stops beating is still
// reported, its silence confirmed by a read.
#include <catch2/catch.hpp>

#include <future>
#include <thread>

#include "edl/store.h"
#include "elastic/membership.h"
#include "testing/etcd_cluster.h"
#include "testing/require_dep.h"

using namespace std::chrono_literals;
using edl::elastic::Membership;
using edl::elastic::MembershipOptions;
using edl::testing::EtcdCluster;

namespace {

MembershipOptions opts(const std::string& id) {
  MembershipOptions o;
  o.job_id = "etcdwatch";
  o.worker_id = id;
  o.hostname = "host-" + id;  // another host: no loopback probe, silence alone tells
  o.min_np = 2;
  o.max_np = 2;
  o.heartbeat = 100ms;
  o.lease = 2000ms;
  o.rendezvous_timeout = 10000ms;
  o.start_window = 100ms;
  return o;
}

}  // namespace

TEST_CASE("etcd: the watched peers' leases cost no read per heartbeat, and a peer that stops beating is reported",
          "[liveness][etcd]") {
  EtcdCluster& c = EtcdCluster::shared();
  if (!edl::testing::require_dep("etcd", c.available(), "Debian package etcd-server")) return;
  c.clear();
  auto connect = [&] { return edl::connect_store(c.url(0)); };
  MembershipOptions oa = opts("a"), ob = opts("b");
  oa.beat_store = connect();
  ob.beat_store = connect();
  Membership a(connect(), oa);
  Membership b(connect(), ob);
  auto fb = std::async(std::launch::async, [&] { return b.rendezvous(nullptr); });
  auto ga = a.rendezvous(nullptr);
  auto gb = fb.get();
  std::promise<std::string> reason;
  a.watch(ga, [&](const std::string& r) { reason.set_value(r); });
  a.built();
  std::this_thread::sleep_for(1000ms);  // a's stream on b's lease is open and in sync

  // 20 heartbeats of a's watch thread: no Range or read txn for b's lease (b's beats are Txns: a put
  // each, so the reads are told apart by Range, which a single-key get_many is).
  const double ranges = c.received("Range");
  std::this_thread::sleep_for(2000ms);
  CHECK(c.received("Range") - ranges <= 2);  // at most the event stream's renewal read
  auto fut = reason.get_future();
  CHECK(fut.wait_for(0ms) == std::future_status::timeout);  // b beats: never reported

  b.freeze(/*process_dead=*/true);  // b stops beating; its etcd lease lives on for up to 2 x its TTL
  REQUIRE(fut.wait_for(15s) == std::future_status::ready);
  CHECK_THAT(fut.get(), Catch::Contains("worker b") && Catch::Contains("stopped heartbeating"));
  a.unwatch();
}
