// End-to-end elastic scenarios with ranks as threads (memory store + LocalComm): kills at random
// points, silent stops, joins, graceful leaves, scaling down to the minimum, below-minimum and the
// reset limit. After every scenario all finishing workers hold bitwise-identical parameters equal
// to the reference, and the committed history holds every step exactly once.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <random>

#include "harness.h"

using namespace edl::elastic::testing;
using edl::elastic::Worker;


TEST_CASE("steady state: 3 workers train to the reference, no resets", "[scenario]") {
  Cluster c("s_steady", 3, 3);
  c.base.membership.heartbeat = 100ms;  // "no resets" must hold on a loaded machine too
  c.base.membership.lease = 3000ms;
  for (int i = 0; i < 3; ++i) c.start();
  c.check_finishers(3);
  for (const auto& o : c.outcomes) CHECK(o.resets == 0);
}

TEST_CASE("kill -9 of a worker at a random step, rank 0 included", "[scenario][kill]") {
  auto victim = GENERATE(0, 1, 2);
  std::mt19937 rng(1234 + victim);
  int64_t kill_at = 5 + static_cast<int64_t>(rng() % 20);
  Cluster c("s_kill" + std::to_string(victim), 2, 3);
  std::atomic<bool> done{false};
  c.on_step = [&](int i, Worker& w, int64_t step) {
    if (w.view().rank == victim && step == kill_at && !done.exchange(true)) {
      w.simulate_crash();  // dies mid-batch: its next collective fails, its lease expires
    }
  };
  for (int i = 0; i < 3; ++i) c.start();
  c.check_finishers(2);
  int killed = 0;
  for (const auto& o : c.outcomes) killed += o.killed;
  CHECK(killed == 1);
  for (const auto& o : c.outcomes)
    if (o.finished) CHECK(o.last_size == 2);
}

TEST_CASE("kill from another thread at a random time, mid-allreduce", "[scenario][kill]") {
  auto seed = GENERATE(1, 2, 3);
  std::mt19937 rng(seed);
  Cluster c("s_async_kill" + std::to_string(seed), 1, 4);
  c.total = 60;
  c.step_time = 1ms;
  for (int i = 0; i < 4; ++i) c.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(30 + rng() % 80));
  c.worker(static_cast<int>(rng() % 4)).simulate_crash();
  c.check_finishers(3);
}

TEST_CASE("the decider dies in the middle of the rendezvous, another member takes over", "[scenario][rendezvous]") {
  Cluster c("s_decider", 1, 4);
  std::atomic<bool> first_kill{false}, decider_killed{false};
  c.on_step = [&](int i, Worker& w, int64_t step) {
    if (i == 3 && step == 6 && !first_kill.exchange(true)) w.simulate_crash();
  };
  c.on_point = [&](int i, Worker& w, const std::string& point) {
    if (point == "rendezvous:decide" && first_kill && w.view().id >= 1 && !decider_killed.exchange(true)) {
      w.simulate_crash();
      throw Killed{};
    }
  };
  for (int i = 0; i < 4; ++i) c.start();
  c.check_finishers(2);
  CHECK(decider_killed);
}

TEST_CASE("a member dies during sync, the rest re-form and finish", "[scenario][sync]") {
  Cluster c("s_sync", 1, 0);
  std::atomic<bool> joined{false}, killed{false};
  c.on_point = [&](int i, Worker& w, const std::string& point) {
    // Worker 1 dies while the generation that admits worker 3 syncs.
    if (point == "sync" && i == 1 && joined && w.view().size == 4 && !killed.exchange(true)) {
      w.simulate_crash();
      throw Killed{};
    }
  };
  for (int i = 0; i < 3; ++i) c.start();
  std::this_thread::sleep_for(60ms);
  joined = true;
  c.start();
  c.check_finishers(3);
  CHECK(killed);
}

TEST_CASE("a stopped worker (SIGSTOP) is evicted after the lease and rejoins after SIGCONT", "[scenario][stop]") {
  Cluster c("s_stop", 1, 3);
  c.total = 50;
  std::atomic<bool> stopped{false};
  std::atomic<bool> others_went_on{false};  // set on worker 1's thread, checked on the test thread
  std::atomic<int64_t> others_progress{0};
  c.on_step = [&](int i, Worker& w, int64_t step) {
    if (i != 1) others_progress = std::max<int64_t>(others_progress, step);
    if (i == 1 && step == 10 && !stopped.exchange(true)) {
      w.membership().freeze();  // no heartbeats, no progress
      auto t0 = std::chrono::steady_clock::now();
      int64_t at = others_progress;
      // Stay stopped until the others have made progress without us (they evicted us), bounded.
      while (others_progress < at + 5 && std::chrono::steady_clock::now() - t0 < 5s)
        std::this_thread::sleep_for(5ms);
      others_went_on = others_progress >= at + 5;
      w.membership().thaw();  // SIGCONT: its communicator is dead, it rejoins as a newcomer
    }
  };
  for (int i = 0; i < 3; ++i) c.start();
  c.check_finishers(3);
  CHECK(stopped);
  CHECK(others_went_on);  // the others made progress while worker 1 was stopped
}

TEST_CASE("joins during training are admitted at a batch boundary without losing a step", "[scenario][join]") {
  Cluster c("s_join", 2, 0);
  c.total = 60;
  for (int i = 0; i < 2; ++i) c.start();
  std::this_thread::sleep_for(40ms);
  c.start();
  std::this_thread::sleep_for(40ms);
  c.start();
  c.check_finishers(4);
  for (const auto& o : c.outcomes) CHECK(o.last_size == 4);
}

TEST_CASE("graceful leave scales down to the minimum and the rest go on", "[scenario][leave]") {
  Cluster c("s_leave", 2, 0);
  c.base.membership.heartbeat = 100ms;  // the reset count below must not see load-induced lease expiries
  c.base.membership.lease = 3000ms;
  c.on_step = [&](int i, Worker& w, int64_t step) {
    if (i == 2 && step == 8) w.request_leave();
  };
  for (int i = 0; i < 3; ++i) c.start();
  c.check_finishers(2, {2});
  CHECK(c.outcomes[2].finished);
  CHECK(c.outcomes[2].step < c.total);
  for (int i = 0; i < 2; ++i) {
    CHECK(c.outcomes[i].last_size == 2);
    CHECK(c.outcomes[i].resets == 1);  // a planned change: commit, re-rendezvous, no failure
  }
}

TEST_CASE("fewer than the minimum for longer than the timeout: a clean JobError", "[scenario][min]") {
  Cluster c("s_min", 2, 2);
  c.base.membership.rendezvous_timeout = 400ms;
  c.on_step = [&](int i, Worker& w, int64_t step) {
    if (i == 1 && step == 5) w.simulate_crash();
  };
  for (int i = 0; i < 2; ++i) c.start();
  c.join_all();
  CHECK(c.outcomes[0].job_error);
  CHECK_THAT(c.outcomes[0].error, Catch::Contains("below the minimum of 2"));
  CHECK(c.outcomes[1].killed);
}

TEST_CASE("the reset limit stops the job with a JobError", "[scenario][reset-limit]") {
  Cluster c("s_limit", 1, 3);
  c.base.reset_limit = 1;
  c.on_step = [&](int i, Worker& w, int64_t step) {
    if ((i == 1 && step == 5) || (i == 2 && step == 15)) w.simulate_crash();
  };
  for (int i = 0; i < 3; ++i) c.start();
  c.join_all();
  CHECK(c.outcomes[0].job_error);
  CHECK_THAT(c.outcomes[0].error, Catch::Contains("reset limit of 1"));
}

TEST_CASE("a whole-job restart resumes from the checkpoint directory", "[scenario][checkpoint]") {
  char tmpl[] = "/tmp/edl_elastic_ckpt_XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  std::string dir = tmpl;
  {
    Cluster c("s_ckpt_a", 2, 2);
    c.base.checkpoint_dir = dir;
    c.total = 20;
    for (int i = 0; i < 2; ++i) c.start();
    c.check_finishers(2);
  }
  Cluster c("s_ckpt_a", 3, 3);  // the same job restarted (3 workers, a fresh store) over the same directory
  c.base.checkpoint_dir = dir;
  c.total = 40;
  std::atomic<int64_t> first_step{-1};
  c.on_step = [&](int, Worker&, int64_t step) {
    int64_t none = -1;
    first_step.compare_exchange_strong(none, step);
  };
  for (int i = 0; i < 3; ++i) c.start();
  c.check_finishers(3);
  CHECK(first_step == 20);  // resumed: steps 0..19 were not redone
  {
    Cluster other("s_ckpt_other", 1, 1);  // another job over the same directory: refused, naming the file
    other.base.checkpoint_dir = dir;
    other.start();
    other.join_all();
    CHECK_FALSE(other.outcomes[0].finished);
    CHECK_THAT(other.outcomes[0].error, Catch::Contains(dir + "/state.edlckpt") && Catch::Contains("s_ckpt_a"));
  }
  std::remove((dir + "/state.edlckpt").c_str());
  std::remove((dir + "/state.edlckpt.lock").c_str());
  rmdir(dir.c_str());
}

TEST_CASE("a member busy in a long batch is waited for (grace), not evicted", "[scenario][grace]") {
  Cluster c("s_grace", 1, 3);
  c.base.membership.rendezvous_grace = 3000ms;
  c.base.membership.heartbeat = 100ms;  // the crashed worker goes by its probe; a long lease keeps
  c.base.membership.lease = 3000ms;     // load-induced expiries out of the reset counts
  std::atomic<bool> killed{false};
  std::atomic<int> size_of_gen2{0};
  c.on_step = [&](int i, Worker& w, int64_t step) {
    if (i == 1 && step == 8 && !killed.exchange(true)) w.simulate_crash();
    if (i == 2 && step == 8) std::this_thread::sleep_for(600ms);  // a long batch, still heartbeating
    if (i == 0 && w.view().id == 2) size_of_gen2 = w.view().size;
  };
  for (int i = 0; i < 3; ++i) c.start();
  c.check_finishers(2);
  CHECK(size_of_gen2 == 2);  // the generation formed after the failure kept the busy worker 2
}
