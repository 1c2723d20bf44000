// GenerationInfo's role, previous generation and reason (include/edl/state.h) through real
// membership histories with ranks as threads: a start, a join, a graceful leave, a kill, a silent
// stop with re-admission, and the classification of each round from the store's record.
#include <catch2/catch.hpp>

#include <atomic>
#include <map>

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

// Every member of a generation got the same reason and previous size, and the previous size is the
// size of the generation before (as its members saw it).
void check_agreement(const Cluster& c) {
  std::map<uint64_t, GenerationInfo> first;
  for (size_t w = 0; w < c.outcomes.size(); ++w) {
    for (const auto& g : c.outcomes[w].generations) {
      INFO("worker " << w << ": " << describe(c.outcomes[w].generations));
      auto [it, fresh] = first.emplace(g.generation, g);
      if (fresh) continue;
      CHECK(g.reason == it->second.reason);
      CHECK(g.previous_size == it->second.previous_size);
      CHECK(g.size == it->second.size);
    }
  }
  for (const auto& [id, g] : first) {
    auto before = first.find(id - 1);
    if (before != first.end()) CHECK(g.previous_size == before->second.size);
  }
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
    CHECK(o.generations[0].previous_size == 0);
  }
  check_agreement(c);
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
  CHECK(c.outcomes[2].run_outcome == edl::elastic::RunOutcome::kLeft);
  CHECK(c.outcomes[0].run_outcome == edl::elastic::RunOutcome::kFinished);
  CHECK(c.outcomes[1].run_outcome == edl::elastic::RunOutcome::kFinished);
  check_agreement(c);
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
    CHECK(gs.back().previous_size == 3);
  }
  check_agreement(c);
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
      CHECK(gs[k].after_failure);                     // its own generation failed under it
      CHECK(gs[k].reason == ChangeReason::kJoin);     // but the others' last generation simply grew
    } else {
      CHECK(gs[k].role == GenerationRole::kSurvivor);
    }
  }
  CHECK(readmitted);
  check_agreement(c);
}

TEST_CASE("generation facts: decide_change reads the round's record in the store", "[generation]") {
  using edl::elastic::decide_change;
  using edl::elastic::format_members;
  using edl::elastic::Keys;
  using edl::elastic::Member;
  auto store = edl::make_memory_store();
  Keys k("gi_reason");
  store->set(k.members(4), format_members({{"a", "h", ""}, {"b", "h", ""}, {"c", "h", ""}}));
  std::vector<Member> next = {{"a", "h", ""}, {"b", "h", ""}, {"c", "h", ""}, {"d", "h", ""}};
  CHECK(decide_change(*store, k, 5, next).reason == ChangeReason::kJoin);
  CHECK(decide_change(*store, k, 5, next).previous_size == 3);
  store->set(k.abort(4), "peer lost");  // G-1 was aborted: a failure, whoever joined
  CHECK(decide_change(*store, k, 5, next).reason == ChangeReason::kFailure);
  store->del(k.abort(4));
  next = {{"a", "h", ""}, {"b", "h", ""}};
  store->set(k.left(4, "c"), "");
  CHECK(decide_change(*store, k, 5, next).reason == ChangeReason::kLeave);
  store->del(k.left(4, "c"));
  store->set(k.dropped(5, "c"), "alive but did not arrive within EDL_RENDEZVOUS_GRACE_MS (stuck)");
  store->set(k.abort(4), "progress deadline");
  CHECK(decide_change(*store, k, 5, next).reason == ChangeReason::kEviction);
  store->set(k.dropped(5, "c"), "dead: its lease is gone");
  CHECK(decide_change(*store, k, 5, next).reason == ChangeReason::kFailure);
  CHECK(decide_change(*store, k, 5, next).previous_size == 3);
  CHECK(decide_change(*store, k, 1, next).reason == ChangeReason::kStart);
  CHECK(decide_change(*store, k, 1, next).previous_size == 0);
  // The previous generation's members are gone: all members were lost, a restart.
  CHECK(decide_change(*store, k, 9, next).reason == ChangeReason::kStart);
  CHECK(decide_change(*store, k, 9, next).previous_size == 0);
  CHECK(edl::elastic::role_of(0, 3) == GenerationRole::kNewcomer);
  CHECK(edl::elastic::role_of(2, 3) == GenerationRole::kSurvivor);
  CHECK(edl::elastic::role_of(1, 3) == GenerationRole::kReadmitted);
}

TEST_CASE("generation facts: the change record travels in the members value", "[generation]") {
  using edl::elastic::format_members;
  using edl::elastic::GenerationChange;
  using edl::elastic::parse_change;
  using edl::elastic::parse_members;
  const std::string v =
      format_members({{"a", "h1", ""}, {"b", "h2", "127.0.0.1:9"}}, GenerationChange{ChangeReason::kEviction, 3});
  CHECK(v == "a h1 -\nb h2 127.0.0.1:9\n#change eviction 3\n");  // "-": no probe
  REQUIRE(parse_members(v).size() == 2);  // the record is not a member
  CHECK(parse_members(v)[1].host == "h2");
  CHECK(parse_members(v)[1].probe == "127.0.0.1:9");
  CHECK(parse_members(v)[0].probe.empty());
  REQUIRE(parse_change(v).has_value());
  CHECK(parse_change(v)->reason == ChangeReason::kEviction);
  CHECK(parse_change(v)->previous_size == 3);
  CHECK_FALSE(parse_change("a h\n").has_value());                // no record
  CHECK_FALSE(parse_change("a h\n#change sideways 2\n").has_value());  // not a reason
  CHECK_FALSE(parse_change("a h\n#change join -1\n").has_value());
}

// A decision without the record (hand-written here; an EDL before the record existed) is judged by
// each member from the store as the decider would.
TEST_CASE("generation facts: a decision without the change record is judged from the store", "[generation]") {
  auto store = edl::make_memory_store();
  edl::elastic::Keys k("gi_norecord");
  store->set(k.members(1), edl::elastic::format_members({{"a", "localhost", ""}, {"b", "localhost", ""}}));
  store->set(k.gen(), "1");
  store->set(k.members(2), "a localhost\nb localhost\nc localhost\n");
  store->set(k.gen(), "2");
  edl::elastic::MembershipOptions o;
  o.job_id = "gi_norecord";
  o.worker_id = "c";
  o.heartbeat = 100ms;
  o.lease = 1000ms;
  edl::elastic::Membership m(store, o);
  // Round 2 is decided already (and lists c): c's rendezvous from generation 1 takes that decision.
  edl::elastic::GenerationView g1;
  g1.id = 1;
  g1.size = 2;
  auto v = m.rendezvous(&g1);
  m.stop();
  CHECK(v.id == 2);
  CHECK(v.rank == 2);
  CHECK(v.previous_size == 2);
  CHECK(v.reason == ChangeReason::kJoin);
}
