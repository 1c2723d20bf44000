// GenerationInfo's role, previous generation and reason (include/edl/state.h) through real
// membership histories with ranks as threads: a start, a join, a graceful leave, a kill, a silent
// stop with re-admission, and the classification of each round from the store's record.
#include <catch2/catch.hpp>

#include <atomic>

#include "elastic/generation_change.h"
#include "elastic/keys.h"
#include "elastic/member_list.h"
#include "harness.h"

using namespace edl::elastic::testing;
using edl::elastic::ChangeReason;
using edl::elastic::GenerationInfo;
using edl::elastic::GenerationRole;
using edl::elastic::Worker;

namespace {

std::string describe(const std::vector<GenerationInfo>& gs) {
  std::string s;
  for (const auto& g : gs)
    s += "g" + std::to_string(g.generation) + " " + edl::elastic::role_name(g.role) + " prev " +
         std::to_string(g.previous_generation) + " " + edl::elastic::reason_name(g.reason) + "; ";
  return s;
}

}  // namespace

TEST_CASE("generation facts: the first generation is a start for newcomers", "[generation]") {
  Cluster c("gi_start", 2, 2);
  c.total = 5;
  for (int i = 0; i < 2; ++i) c.start();
  c.check_finishers(2);
  for (const auto& o : c.outcomes) {
    INFO(describe(o.generations));
    REQUIRE(o.generations.size() == 1);
    CHECK(o.generations[0].generation == 1);
    CHECK(o.generations[0].role == GenerationRole::kNewcomer);
    CHECK(o.generations[0].previous_generation == 0);
    CHECK(o.generations[0].reason == ChangeReason::kStart);
  }
}

TEST_CASE("generation facts: a join makes survivors and a newcomer, a leave is a leave", "[generation]") {
  Cluster c("gi_join_leave", 2, 0);
  c.total = 60;
  c.base.membership.lease = 3000ms;  // no load-induced evictions in this history
  c.on_step = [&](int i, Worker& w, int64_t step) {
    if (i == 2 && step >= 30) w.request_leave();
  };
  for (int i = 0; i < 2; ++i) c.start();
  std::this_thread::sleep_for(40ms);
  c.start();
  c.check_finishers(2, {2});
  REQUIRE(c.outcomes[2].finished);
  for (int i = 0; i < 2; ++i) {
    const auto& gs = c.outcomes[i].generations;
    INFO("worker " << i << ": " << describe(gs));
    // Worker 2 is admitted at generation 1 (when it arrives within the start window) or later.
    REQUIRE(gs.size() >= 2);
    const auto& last = gs.back();
    CHECK(last.role == GenerationRole::kSurvivor);
    CHECK(last.previous_generation + 1 == last.generation);
    CHECK(last.reason == ChangeReason::kLeave);
    CHECK(last.size == 2);
    CHECK(last.previous_size == 3);
    if (gs.size() == 3) {
      CHECK(gs[1].reason == ChangeReason::kJoin);
      CHECK(gs[1].role == GenerationRole::kSurvivor);
    }
  }
  const auto& joiner = c.outcomes[2].generations;
  INFO("worker 2: " << describe(joiner));
  REQUIRE(!joiner.empty());
  CHECK(joiner[0].role == GenerationRole::kNewcomer);
  CHECK(joiner[0].previous_generation == 0);
  CHECK((joiner[0].reason == ChangeReason::kJoin || joiner[0].generation == 1));
}

TEST_CASE("generation facts: survivors of a kill see a failure", "[generation][kill]") {
  Cluster c("gi_kill", 2, 3);
  std::atomic<bool> done{false};
  c.on_step = [&](int i, Worker& w, int64_t step) {
    if (i == 2 && step == 10 && !done.exchange(true)) w.simulate_crash();
  };
  for (int i = 0; i < 3; ++i) c.start();
  c.check_finishers(2);
  for (int i = 0; i < 2; ++i) {
    const auto& gs = c.outcomes[i].generations;
    INFO("worker " << i << ": " << describe(gs));
    REQUIRE(gs.size() >= 2);
    CHECK(gs.back().reason == ChangeReason::kFailure);
    CHECK(gs.back().role == GenerationRole::kSurvivor);
    CHECK(gs.back().after_failure);
  }
}

TEST_CASE("generation facts: a stopped worker left out and admitted again is readmitted", "[generation][stop]") {
  Cluster c("gi_stop", 1, 3);
  c.total = 50;
  std::atomic<bool> stopped{false};
  std::atomic<int64_t> others_progress{0};
  c.on_step = [&](int i, Worker& w, int64_t step) {
    if (i != 1) others_progress = std::max<int64_t>(others_progress, step);
    if (i == 1 && step == 10 && !stopped.exchange(true)) {
      w.membership().freeze();
      auto t0 = std::chrono::steady_clock::now();
      int64_t at = others_progress;
      while (others_progress < at + 5 && std::chrono::steady_clock::now() - t0 < 5s)
        std::this_thread::sleep_for(5ms);
      w.membership().thaw();
    }
  };
  for (int i = 0; i < 3; ++i) c.start();
  c.check_finishers(3);
  const auto& gs = c.outcomes[1].generations;
  INFO("worker 1: " << describe(gs));
  REQUIRE(gs.size() >= 2);
  // Its first generation after the stop skipped at least the one the others formed without it.
  bool readmitted = false;
  for (size_t k = 1; k < gs.size(); ++k) {
    if (gs[k].generation > gs[k - 1].generation + 1) {
      readmitted = true;
      CHECK(gs[k].role == GenerationRole::kReadmitted);
      CHECK(gs[k].previous_generation == gs[k - 1].generation);
    } else {
      CHECK(gs[k].role == GenerationRole::kSurvivor);
    }
  }
  CHECK(readmitted);
}

TEST_CASE("generation facts: change_reason reads the round's record in the store", "[generation]") {
  using edl::elastic::change_reason;
  using edl::elastic::format_members;
  using edl::elastic::GenerationView;
  using edl::elastic::Keys;
  using edl::elastic::Member;
  auto store = edl::make_memory_store();
  Keys k("gi_reason");
  store->set(k.members(4), format_members({{"a", "h"}, {"b", "h"}, {"c", "h"}}));
  GenerationView v;
  v.id = 5;
  v.members = {{"a", "h"}, {"b", "h"}, {"c", "h"}, {"d", "h"}};
  CHECK(change_reason(*store, k, v, false) == ChangeReason::kJoin);
  CHECK(change_reason(*store, k, v, true) == ChangeReason::kFailure);
  v.members = {{"a", "h"}, {"b", "h"}};
  store->set(k.left(4, "c"), "");
  CHECK(change_reason(*store, k, v, false) == ChangeReason::kLeave);
  store->del(k.left(4, "c"));
  store->set(k.dropped(5, "c"), "alive but did not arrive within EDL_RENDEZVOUS_GRACE_MS (stuck)");
  store->set(k.abort(4), "progress deadline");
  CHECK(change_reason(*store, k, v, false) == ChangeReason::kEviction);
  store->set(k.dropped(5, "c"), "dead: its lease is gone");
  CHECK(change_reason(*store, k, v, false) == ChangeReason::kFailure);
  v.id = 1;
  CHECK(change_reason(*store, k, v, false) == ChangeReason::kStart);
  v.id = 9;  // the previous generation's members are gone: all members were lost, a restart
  CHECK(change_reason(*store, k, v, false) == ChangeReason::kStart);
  CHECK(edl::elastic::role_of(0, 3) == GenerationRole::kNewcomer);
  CHECK(edl::elastic::role_of(2, 3) == GenerationRole::kSurvivor);
  CHECK(edl::elastic::role_of(1, 3) == GenerationRole::kReadmitted);
}
