// Stop-free joins with ranks as threads (harness.h: memory store + LocalComm; the state servers
// listen on loopback): the newcomer receives the tensors over several batches while the job trains
// on, and every finisher ends with the reference parameters, the same q bits and every step once —
// also when a serving survivor or the newcomer is killed during the catch-up.
#include <catch2/catch.hpp>

#include <atomic>

#include "elastic/state_join.h"
#include "harness.h"

using namespace edl::elastic::testing;
using edl::elastic::ChangeReason;
using edl::elastic::GenerationRole;
using edl::elastic::Worker;

namespace {

// Stop-free joins with chunks of at most 256 bytes: the 2 x 257 floats of the toy model then take
// several batch boundaries to arrive.
void stop_free(Cluster& c) {
  c.base.stop_free.enabled = true;
  c.base.stop_free.max_chunk_bytes = 256;
  c.base.stop_free.io_timeout = 5000ms;
  c.total = 80;
}

// Starts worker `i` once worker 0 reached `step`.
void start_at(Cluster& c, std::atomic<int64_t>& at, int64_t step) {
  for (int k = 0; k < 2000 && at.load() < step; ++k) std::this_thread::sleep_for(5ms);
  c.start();
}

}  // namespace

TEST_CASE("stop-free join: the newcomer catches up while the job trains on, bitwise identical at the end",
          "[stopfree][join]") {
  Cluster c("sf_join", 2, 3);
  stop_free(c);
  std::atomic<int64_t> at{0};
  std::atomic<int> catching{0}, survivors_waiting{0};
  c.on_step = [&](int i, Worker& w, int64_t step) {
    if (i == 0) at.store(step);
    if (i == 2 && w.catching_up()) ++catching;
    if (i < 2 && w.catching_up()) ++survivors_waiting;
  };
  c.start();
  c.start();
  start_at(c, at, 10);
  c.check_finishers(3);
  CHECK(catching.load() >= 4);  // 2056 bytes in chunks of 256: the state arrived over several batches
  CHECK(survivors_waiting.load() == 0);
  uint64_t served = 0;
  for (int i = 0; i < 2; ++i) served += c.worker(i).state_server()->served_bytes();
  CHECK(served == 2 * kParams * sizeof(float));  // each tensor byte sent once, by the survivors' servers
  const auto& g = c.outcomes[2].generations;
  REQUIRE(!g.empty());
  CHECK(g.front().role == GenerationRole::kNewcomer);
  CHECK(g.front().reason == ChangeReason::kJoin);
  for (int i = 0; i < 2; ++i) {
    CHECK(c.outcomes[i].resets == 1);  // one planned change, no failure
    CHECK(c.outcomes[i].generations.back().reason == ChangeReason::kJoin);
  }
}

TEST_CASE("stop-free join: a survivor serving a slice is killed during the catch-up", "[stopfree][kill]") {
  Cluster c("sf_kill_source", 2, 4);
  stop_free(c);
  std::atomic<int64_t> at{0};
  std::atomic<bool> killed{false};
  std::atomic<int> catching{0};
  c.on_step = [&](int i, Worker& w, int64_t step) {
    if (i == 0) at.store(step);
    // After the newcomer's first chunk arrived, a survivor serving it dies.
    if (i == 3 && w.catching_up() && ++catching == 2 && !killed.exchange(true)) c.worker(1).simulate_crash();
  };
  for (int i = 0; i < 3; ++i) c.start();
  start_at(c, at, 10);
  c.check_finishers(3);
  CHECK(killed.load());
  CHECK(c.outcomes[1].killed);
  CHECK(c.outcomes[3].finished);
}

TEST_CASE("stop-free join: the newcomer is killed during the catch-up, the others go on", "[stopfree][kill]") {
  Cluster c("sf_kill_newcomer", 2, 3);
  stop_free(c);
  std::atomic<int64_t> at{0};
  std::atomic<int> catching{0};
  c.on_step = [&](int i, Worker& w, int64_t step) {
    if (i == 0) at.store(step);
    if (i == 2 && w.catching_up() && ++catching == 2) w.simulate_crash();  // after its first chunk
  };
  c.start();
  c.start();
  start_at(c, at, 10);
  c.check_finishers(2);
  CHECK(c.outcomes[2].killed);
}

TEST_CASE("stop-free join: a second newcomer during the first one's catch-up, commits every 5 batches",
          "[stopfree][join]") {
  Cluster c("sf_two", 2, 0);
  stop_free(c);
  c.base.commit_every = 5;  // while a newcomer is connected the survivors commit every batch
  std::atomic<int64_t> at{0};
  std::atomic<bool> second{false};
  c.on_step = [&](int i, Worker& w, int64_t step) {
    if (i == 0) at.store(step);
    if (i == 2 && w.catching_up()) second.store(true);
  };
  c.start();
  c.start();
  start_at(c, at, 8);
  for (int k = 0; k < 2000 && !second.load(); ++k) std::this_thread::sleep_for(5ms);
  c.start();
  c.check_finishers(4);
  for (const auto& o : c.outcomes) CHECK(o.last_size == 4);
}

namespace {

// One member of a sync test: a tensor, a scalar, committed at `step`; `synced` members took part
// in an earlier sync (survivors), the others are fresh (newcomers).
struct SyncMember {
  std::vector<float> p = std::vector<float>(64);
  int64_t s = 0;
  edl::elastic::State state;
  edl::elastic::JoinPlan plan;
  SyncMember() {
    state.register_tensor("p", p.data(), p.size(), edl::DataType::kFloat32);
    state.register_scalar("s", &s);
  }
};

// Runs sync_state_stopfree on 3 thread-ranks: all but member `fresh` synced before (a 2-rank sync),
// member `fresh` did not; member r holds p = r + 1, s = 10 (r + 1) at its committed step steps[r].
std::vector<std::unique_ptr<SyncMember>> sync_case(const std::string& tag, std::vector<int64_t> steps,
                                                   std::vector<std::string> addresses, int fresh = 2) {
  std::vector<std::unique_ptr<SyncMember>> m;
  for (int r = 0; r < 3; ++r) {
    m.push_back(std::make_unique<SyncMember>());
    m[r]->state.commit();
  }
  auto group = [&](const std::string& key, int size, int rank) {
    return std::make_shared<edl::elastic::CommGroup>(std::make_shared<LocalComm>(
        LocalHub::get(tag + key, size), rank, 1, std::chrono::milliseconds(3000), std::chrono::milliseconds(3000)));
  };
  std::vector<std::thread> t;
  for (int r = 0, k = 0; r < 3; ++r)
    if (r != fresh) t.emplace_back([&, r, k = k++] { edl::elastic::sync_state(m[r]->state, *group("/prep", 2, k)); });
  for (auto& th : t) th.join();
  t.clear();
  for (int r = 0; r < 3; ++r) {
    std::fill(m[r]->p.begin(), m[r]->p.end(), static_cast<float>(r + 1));
    m[r]->s = 10 * (r + 1);
    m[r]->state.step = steps[r];
    m[r]->state.commit();
  }
  for (int r = 0; r < 3; ++r)
    t.emplace_back([&, r] { m[r]->plan = edl::elastic::sync_state_stopfree(m[r]->state, *group("/join", 3, r), addresses[r]); });
  for (auto& th : t) th.join();
  return m;
}

}  // namespace

TEST_CASE("stop-free sync: a skeleton to the newcomer only when the survivors agree", "[stopfree][sync]") {
  SECTION("survivors at the same step: the newcomer takes scalars and step, its tensors wait") {
    auto m = sync_case("sfs_a", {5, 5, 0}, {"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"});
    CHECK_FALSE(m[0]->plan.catch_up);
    CHECK_FALSE(m[1]->plan.catch_up);
    REQUIRE(m[2]->plan.catch_up);
    CHECK(m[2]->plan.step == 5);
    CHECK(m[2]->state.step == 5);
    CHECK(m[2]->s == 10);          // rank 0's scalar
    CHECK(m[2]->p[0] == 3.0f);     // its own tensor until the catch-up
    CHECK(m[2]->state.committed_step() == 0);  // restore() still returns to its own state
    m[2]->state.restore();
    CHECK(m[2]->s == 30);
    REQUIRE(m[2]->plan.sources.size() == 2);
    CHECK(m[2]->plan.sources[1].rank == 1);
    CHECK(m[2]->plan.sources[1].address == "127.0.0.1:2");
    CHECK(m[1]->p[0] == 2.0f);  // survivors move nothing
  }
  SECTION("rank 0 fresh: the lowest-ranked survivor's skeleton (a broadcast instead of the allgather)") {
    auto m = sync_case("sfs_e", {0, 5, 5}, {"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}, /*fresh=*/0);
    CHECK_FALSE(m[1]->plan.catch_up);
    CHECK_FALSE(m[2]->plan.catch_up);
    REQUIRE(m[0]->plan.catch_up);
    CHECK(m[0]->state.step == 5);
    CHECK(m[0]->s == 20);  // rank 1's scalar
    CHECK(m[0]->p[0] == 1.0f);
    REQUIRE(m[0]->plan.sources.size() == 2);
    CHECK(m[0]->plan.sources[0].rank == 1);
  }
  SECTION("survivors at different steps (a failure hit the commit): the ordinary sync") {
    auto m = sync_case("sfs_b", {5, 4, 0}, {"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"});
    for (auto& x : m) {
      CHECK_FALSE(x->plan.catch_up);
      CHECK(x->p[0] == 1.0f);  // everyone holds rank 0's commit of step 5
      CHECK(x->state.step == 5);
    }
  }
  SECTION("a newcomer with a newer commit (a checkpoint) wins, as in the ordinary sync") {
    auto m = sync_case("sfs_c", {5, 5, 9}, {"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"});
    for (auto& x : m) {
      CHECK_FALSE(x->plan.catch_up);
      CHECK(x->p[0] == 3.0f);
      CHECK(x->state.step == 9);
    }
  }
  SECTION("a survivor without a state server: the ordinary sync") {
    auto m = sync_case("sfs_d", {5, 5, 0}, {"127.0.0.1:1", "", "127.0.0.1:3"});
    CHECK_FALSE(m[2]->plan.catch_up);
    CHECK(m[2]->p[0] == 1.0f);
  }
}

// Survivors arrive at the join's generation before the agreed boundary (docs/elastic.md, "Stop-free
// joins", step 3): a leave asked for after that arrival is made from the join's generation, and a
// kill in that window re-forms the job without the dead (its prepared arrival and election void).
TEST_CASE("stop-free join: a survivor asked to leave after it arrived ahead leaves from the join's generation",
          "[stopfree][leave]") {
  Cluster c("sf_leave_prepared", 2, 3);
  stop_free(c);
  std::atomic<int64_t> at{0};
  std::atomic<int> leaver{-1};
  // The first survivor whose arrival is prepared (the one whose watch saw the join first always is:
  // the other may see it only once the change is agreed, and then takes the path without one).
  c.on_step = [&](int i, Worker& w, int64_t step) {
    if (i == 0) at.store(step);
    int none = -1;
    if (i < 2 && w.membership().prepared_for(w.view().id + 1) && leaver.compare_exchange_strong(none, i))
      w.request_leave();
  };
  c.start();
  c.start();
  start_at(c, at, 10);
  c.join_all();
  REQUIRE(leaver.load() >= 0);
  const int stays = 1 - leaver.load();
  c.check_finishers(2, {leaver.load()});
  const auto& o = c.outcomes[static_cast<size_t>(leaver.load())];
  CHECK(o.run_outcome == edl::elastic::RunOutcome::kLeft);
  REQUIRE(o.generations.size() == 2);
  CHECK(o.generations.back().reason == ChangeReason::kJoin);  // a survivor of the join, no failure
  CHECK(o.generations.back().role == GenerationRole::kSurvivor);
  for (int i : {stays, 2}) {
    CHECK(c.outcomes[static_cast<size_t>(i)].generations.back().reason == ChangeReason::kLeave);
    CHECK(c.outcomes[static_cast<size_t>(i)].last_size == 2);
  }
  CHECK(c.outcomes[static_cast<size_t>(stays)].resets == 2);  // the join and the leave
}

TEST_CASE("stop-free join: a survivor killed after it arrived ahead, before the boundary", "[stopfree][kill]") {
  Cluster c("sf_kill_prepared", 3, 4);
  stop_free(c);
  std::atomic<int64_t> at{0};
  std::atomic<bool> killed{false};
  std::atomic<int> victim{-1};
  c.on_step = [&](int i, Worker& w, int64_t step) {
    if (i == 0) at.store(step);
    if (i < 3 && w.membership().prepared_for(w.view().id + 1) && !killed.exchange(true)) {
      victim.store(i);
      w.simulate_crash();
    }
  };
  for (int i = 0; i < 3; ++i) c.start();
  start_at(c, at, 10);
  c.check_finishers(3);
  REQUIRE(killed.load());
  CHECK(c.outcomes[static_cast<size_t>(victim.load())].killed);
}
