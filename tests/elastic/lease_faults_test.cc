// Faults around the lease thread and the rendezvous (issue 13 items 1 and 6), ranks as threads:
// a generation whose every live member is stuck inside a batch is replaced by newcomers (they
// decide, drop the stuck member and resume from the checkpoint); a worker asked to leave while it
// waits to be admitted leaves at once; a store lost under the lease thread fails the training
// thread with a StoreError naming the store instead of being logged and forgotten.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <optional>

#include "edl/elastic.h"
#include "edl/store_server.h"
#include "harness.h"

using namespace edl::elastic::testing;
using edl::elastic::Worker;

namespace {

bool finished_of(Cluster& c, int i) {
  std::lock_guard<std::mutex> l(c.mu);
  return static_cast<int>(c.outcomes.size()) > i && c.outcomes[i].finished;
}

}  // namespace

// The only member is stuck (alive, heartbeating): nobody else can abort the generation and decide
// the next one, so its own progress deadline aborts it and a newcomer decides, leaving it out.
TEST_CASE("the only member stuck inside a batch: a newcomer decides without it and resumes the checkpoint",
          "[hardening][progress][stuck]") {
  char tmpl[] = "/tmp/edl_stuck_all_XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  {
    Cluster c("h_allstuck", 1, 2);
    c.base.checkpoint_dir = dir;
    c.base.membership.progress_timeout = 1000ms;
    c.total = 30;
    std::atomic<uint64_t> stuck_gen{0};
    std::atomic<bool> w1_done_while_stuck{false};
    c.on_step = [&](int i, Worker& w, int64_t step) {
      if (i != 0 || step != 10 || stuck_gen.load() != 0) return;
      std::this_thread::sleep_for(300ms);  // the background writer lands the commit of step 9
      stuck_gen = w.view().id;
      // Stuck (its lease thread heartbeats on) until the newcomer finished the job, at most 60 s.
      for (int k = 0; k < 600 && !finished_of(c, 1); ++k) std::this_thread::sleep_for(100ms);
      w1_done_while_stuck = finished_of(c, 1);
    };
    c.start();
    while (stuck_gen.load() == 0) std::this_thread::sleep_for(10ms);
    c.start();  // w1: a newcomer while w0 is stuck
    c.join_all();
    CHECK(w1_done_while_stuck.load());
    const uint64_t g = stuck_gen.load();
    auto abort = c.store->get("h_allstuck/g" + std::to_string(g) + "/abort");
    REQUIRE(abort.has_value());
    CHECK_THAT(*abort, Catch::Contains("EDL_PROGRESS_TIMEOUT_MS"));
    auto next = c.store->get("h_allstuck/g" + std::to_string(g + 1) + "/members");
    REQUIRE(next.has_value());
    CHECK(next->find("w0 ") == std::string::npos);
    CHECK(next->find("w1 ") != std::string::npos);
    auto dropped = c.store->get("h_allstuck/g" + std::to_string(g + 1) + "/dropped/w0");
    REQUIRE(dropped.has_value());  // what edl-run reads to end the stuck process
    CHECK_THAT(*dropped, Catch::Contains("stuck"));
    // w1 resumed the lineage from the checkpoint and trained every step exactly once; w0 woke to
    // a finished job (stale state: a JobError).
    INFO("w0: " << c.outcomes[0].error);
    CHECK(c.outcomes[0].job_error);
    c.check_finishers(1);
  }
  std::remove((dir + "/state.edlckpt").c_str());
  std::remove((dir + "/state.edlckpt.lock").c_str());
  ::rmdir(dir.c_str());
}

// A worker that waits to be admitted (here: the job is at --max-np) and is asked to leave (what
// edl-run's SIGTERM does to a worker a generation left out) returns from run() at once instead
// of waiting for the job to end.
TEST_CASE("a worker asked to leave while it waits to be admitted leaves at once", "[hardening][leave]") {
  Cluster c("h_leavewait", 1, 1);
  c.total = 100;
  std::atomic<bool> w1_left_while_w0_trained{false}, w0_trains{false};
  c.on_step = [&](int i, Worker&, int64_t step) {
    if (i == 0) w0_trains = true;
    if (i != 0 || step != 20) return;
    for (int k = 0; k < 600 && !finished_of(c, 1); ++k) std::this_thread::sleep_for(100ms);  // at most 60 s
    w1_left_while_w0_trained = finished_of(c, 1);
  };
  c.start();
  while (!w0_trains.load()) std::this_thread::sleep_for(10ms);
  c.start();
  // w1 arrived at the next round (its key exists) and waits: no room at max-np 1.
  for (int k = 0; k < 3000 && !c.store->get("h_leavewait/g2/in/w1"); ++k) std::this_thread::sleep_for(10ms);
  REQUIRE(c.store->get("h_leavewait/g2/in/w1").has_value());
  c.worker(1).request_leave();
  c.join_all();
  CHECK(w1_left_while_w0_trained.load());
  CHECK(c.outcomes[1].finished);
  CHECK(c.outcomes[1].step <= 0);  // never trained
  c.check_finishers(1, {1});
}

// Item 6: the lease thread's store error reaches the training thread. One worker on a real TCP
// store; the store dies mid-training; the client retries for EDL_STORE_TIMEOUT_MS (1 s here), then
// the next batch boundary throws a StoreError naming the store, long before training would end.
TEST_CASE("a store lost under the lease thread fails training with a StoreError naming the store",
          "[hardening][store-lost]") {
  edl::StoreServerOptions so;
  so.secret = "lease-faults";
  auto server = std::make_unique<edl::StoreServer>(so);
  const std::string url = server->url();
  const std::string hostport = url.substr(url.find("://") + 3);
  edl::StoreOptions co;
  co.secret = so.secret;
  co.reconnect_timeout = 1000ms;
  co.request_timeout = 2000ms;
  co.connect_timeout = 500ms;
  Cluster c("h_storelost", 1, 1);
  c.store = edl::connect_store(url, co);
  c.total = 100000;  // minutes of training: only the escalation ends it early
  std::atomic<bool> killed{false};
  c.on_step = [&](int, Worker&, int64_t step) {
    if (step == 10 && !killed.exchange(true)) server->stop();
  };
  c.start();
  c.join_all();
  REQUIRE(killed.load());
  const auto& o = c.outcomes[0];
  CHECK_FALSE(o.finished);
  CHECK(o.step < c.total);
  CHECK_THAT(o.error, Catch::Contains("lost the store") && Catch::Contains(hostport) &&
                          Catch::Contains("EDL_STORE_TIMEOUT_MS"));
}
