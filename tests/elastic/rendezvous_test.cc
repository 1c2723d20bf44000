// Membership / rendezvous on a memory store, ranks as threads (no communicator involved).
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <future>
#include <set>
#include <thread>

#include "edl/error.h"
#include "edl/store.h"
#include "elastic/membership.h"

using namespace std::chrono_literals;
using edl::elastic::GenerationView;
using edl::elastic::Membership;
using edl::elastic::MembershipOptions;

namespace {

MembershipOptions opts(const std::string& job, const std::string& id, int min_np, int max_np) {
  MembershipOptions o;
  o.job_id = job;
  o.worker_id = id;
  o.hostname = id.size() % 2 ? "hostA" : "hostB";
  o.min_np = min_np;
  o.max_np = max_np;
  o.heartbeat = 100ms;
  o.lease = 1000ms;  // a loaded 2-core machine can leave a thread unscheduled for a few hundred ms
  o.rendezvous_timeout = 1000ms;
  o.rendezvous_grace = 5000ms;  // long: a test that finishes fast proves the dead were dropped by the heartbeat rule
  o.start_window = 100ms;
  return o;
}

std::vector<std::string> ids(const GenerationView& v) {
  std::vector<std::string> out;
  for (const auto& m : v.members) out.push_back(m.id);
  return out;
}

}  // namespace

TEST_CASE("first rendezvous: every worker agrees on one generation and distinct ranks", "[rendezvous]") {
  auto store = edl::make_memory_store();
  const int n = 6;
  std::vector<std::unique_ptr<Membership>> ms;
  for (int i = 0; i < n; ++i) ms.push_back(std::make_unique<Membership>(store, opts("j1", "w" + std::to_string(i), n, n)));
  std::vector<std::future<GenerationView>> f;
  for (int i = 0; i < n; ++i) f.push_back(std::async(std::launch::async, [&, i] { return ms[i]->rendezvous(nullptr); }));
  std::set<int> ranks;
  std::vector<std::string> first;
  for (int i = 0; i < n; ++i) {
    auto v = f[i].get();
    CHECK(v.id == 1);
    CHECK(v.size == n);
    CHECK(v.members[v.rank].id == "w" + std::to_string(i));
    ranks.insert(v.rank);
    if (first.empty()) first = ids(v);
    CHECK(ids(v) == first);
    int same_host = 0;
    for (const auto& m : v.members) same_host += m.host == v.members[v.rank].host;
    CHECK(v.local_size == same_host);
  }
  CHECK(ranks.size() == n);
  CHECK(store->get("j1/gen") == std::optional<std::string>("1"));
}

TEST_CASE("re-rendezvous keeps survivors' order, drops the dead, appends newcomers", "[rendezvous]") {
  auto store = edl::make_memory_store();
  std::vector<std::unique_ptr<Membership>> ms;
  for (int i = 0; i < 4; ++i) ms.push_back(std::make_unique<Membership>(store, opts("j2", "w" + std::to_string(i), 1, 0)));
  std::vector<std::future<GenerationView>> f;
  for (int i = 0; i < 4; ++i) f.push_back(std::async(std::launch::async, [&, i] { return ms[i]->rendezvous(nullptr); }));
  std::vector<GenerationView> g1;
  for (auto& x : f) g1.push_back(x.get());
  auto order = ids(g1[0]);

  // The worker at rank 1 dies silently (its lease expires), a newcomer arrives.
  int dead = -1;
  for (int i = 0; i < 4; ++i)
    if (g1[i].rank == 1) dead = i;
  ms[dead]->freeze();
  auto newcomer = std::make_unique<Membership>(store, opts("j2", "new", 1, 0));
  auto fn = std::async(std::launch::async, [&] { return newcomer->rendezvous(nullptr); });
  std::this_thread::sleep_for(50ms);  // the newcomer waits on the list
  std::vector<std::future<GenerationView>> f2;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 4; ++i)
    if (i != dead) f2.push_back(std::async(std::launch::async, [&, i] { return ms[i]->rendezvous(&g1[i]); }));
  std::vector<std::string> expect;
  for (const auto& id : order)
    if (id != "w" + std::to_string(dead)) expect.push_back(id);
  expect.push_back("new");
  for (auto& x : f2) {
    auto v = x.get();
    CHECK(v.id == 2);
    CHECK(ids(v) == expect);
    CHECK(v.previous_size == 4);
  }
  auto nv = fn.get();
  CHECK(nv.id == 2);
  CHECK(nv.rank == 3);
  // The dead member was dropped by the heartbeat rule, long before the 5 s grace period.
  CHECK(std::chrono::steady_clock::now() - t0 < 1500ms);
}

TEST_CASE("below the minimum for longer than the timeout is a JobError for everyone", "[rendezvous]") {
  auto store = edl::make_memory_store();
  Membership a(store, opts("j3", "a", 3, 0));
  Membership b(store, opts("j3", "b", 3, 0));
  auto fa = std::async(std::launch::async, [&] { return a.rendezvous(nullptr); });
  auto fb = std::async(std::launch::async, [&] { return b.rendezvous(nullptr); });
  CHECK_THROWS_WITH(fa.get(), Catch::Contains("below the minimum of 3"));
  CHECK_THROWS_AS(fb.get(), edl::JobError);
}

// A newcomer that arrives after the job failed (a member's user error marked <job>/failed, the members
// are gone) decides the next round alone; waiting for EDL_MIN_NP it sees the failure within a lease
// slice and gets JobFailed (edl-run's "do not restart"), not the "below the minimum" JobError after
// EDL_RENDEZVOUS_TIMEOUT_MS.
TEST_CASE("a lone decider waiting for the minimum sees that the job failed", "[rendezvous]") {
  auto store = edl::make_memory_store();
  Membership a(store, opts("jf", "a", 2, 0));
  Membership b(store, opts("jf", "b", 2, 0));
  auto fb = std::async(std::launch::async, [&] { return b.rendezvous(nullptr); });
  a.rendezvous(nullptr);
  fb.get();
  a.mark_failed("worker a at step 3 of generation 1: bad record");
  a.stop();  // both members exit (their leases go)
  b.stop();
  auto o = opts("jf", "c", 2, 0);
  o.rendezvous_timeout = 20000ms;
  Membership c(store, o);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(c.rendezvous(nullptr), edl::elastic::JobFailed);
  CHECK(std::chrono::steady_clock::now() - t0 < 10000ms);  // not the rendezvous timeout
}

TEST_CASE("a join request wakes the running members, max workers is respected", "[rendezvous]") {
  auto store = edl::make_memory_store();
  Membership a(store, opts("j4", "a", 1, 2));
  auto g = a.rendezvous(nullptr);
  REQUIRE(g.size == 1);
  std::atomic<int> failures{0};
  a.watch(g, [&](const std::string&) { failures++; });
  Membership b(store, opts("j4", "b", 1, 2));
  auto fb = std::async(std::launch::async, [&] { return b.rendezvous(nullptr); });
  for (int i = 0; i < 100 && !a.change_pending(); ++i) std::this_thread::sleep_for(10ms);
  REQUIRE(a.change_pending());
  a.unwatch();
  auto g2 = a.rendezvous(&g);
  auto gb = fb.get();
  CHECK(g2.id == 2);
  CHECK(g2.rank == 0);
  CHECK(gb.rank == 1);
  CHECK(failures == 0);

  // A third worker is over max: the members are not woken, the newcomer stays on the list.
  a.watch(g2, [&](const std::string&) { failures++; });
  Membership c(store, opts("j4", "c", 1, 2));
  auto fc = std::async(std::launch::async, [&] {
    try {
      c.rendezvous(nullptr);
    } catch (const edl::elastic::JobFinished&) {
      return true;
    }
    return false;
  });
  std::this_thread::sleep_for(200ms);
  CHECK_FALSE(a.change_pending());
  a.announce_finished(2);  // the job ends: the waiting newcomer leaves quietly
  CHECK(fc.get());
  a.unwatch();
}

TEST_CASE("a silent member (no heartbeat) is reported as a failure to the others", "[rendezvous][liveness]") {
  auto store = edl::make_memory_store();
  Membership a(store, opts("j5", "a", 2, 2));
  Membership b(store, opts("j5", "b", 2, 2));
  auto fb = std::async(std::launch::async, [&] { return b.rendezvous(nullptr); });
  auto ga = a.rendezvous(nullptr);
  auto gb = fb.get();
  std::promise<std::string> reason;
  a.watch(ga, [&](const std::string& r) { reason.set_value(r); });
  auto t0 = std::chrono::steady_clock::now();
  b.freeze();  // SIGSTOP
  auto fut = reason.get_future();
  REQUIRE(fut.wait_for(2s) == std::future_status::ready);
  CHECK_THAT(fut.get(), Catch::Contains("worker b") && Catch::Contains("lease expired"));
  CHECK(std::chrono::steady_clock::now() - t0 < 2500ms);  // lease 1 s + a heartbeat or two (+ load slack)
  CHECK(store->get("j5/g1/abort").has_value());           // the others learn through the abort key
  a.unwatch();
}

TEST_CASE("bad worker ids and options are rejected", "[rendezvous]") {
  auto store = edl::make_memory_store();
  CHECK_THROWS_AS(Membership(store, opts("j6", "bad id", 1, 0)), edl::InvalidArgument);
  CHECK_THROWS_AS(Membership(store, opts("j6", "", 1, 0)), edl::InvalidArgument);
  CHECK_THROWS_AS(Membership(store, opts("j6", "x", 3, 2)), edl::InvalidArgument);
}

TEST_CASE("a dead process is dropped at once through its liveness probe, a stopped one is not", "[rendezvous][probe]") {
  auto store = edl::make_memory_store();
  auto slow = [](const std::string& id) {
    auto o = opts("j7", id, 1, 0);
    o.heartbeat = 1000ms;  // the heartbeat rule alone would need > 1.2 s
    o.lease = 5000ms;
    o.rendezvous_grace = 1500ms;
    return o;
  };
  std::vector<std::unique_ptr<Membership>> ms;
  for (const char* id : {"a", "b", "c"}) ms.push_back(std::make_unique<Membership>(store, slow(id)));
  std::vector<std::future<GenerationView>> f;
  for (int i = 0; i < 3; ++i) f.push_back(std::async(std::launch::async, [&, i] { return ms[i]->rendezvous(nullptr); }));
  std::vector<GenerationView> g1;
  for (auto& x : f) g1.push_back(x.get());

  SECTION("killed: probe refused") {
    ms[2]->freeze(/*process_dead=*/true);
    auto t0 = std::chrono::steady_clock::now();
    auto f0 = std::async(std::launch::async, [&] { return ms[0]->rendezvous(&g1[0]); });
    auto v1 = ms[1]->rendezvous(&g1[1]);
    auto v0 = f0.get();
    CHECK(v0.size == 2);
    CHECK(v1.size == 2);
    CHECK(std::chrono::steady_clock::now() - t0 < 600ms);
  }
  SECTION("stopped: probe still accepts, the heartbeat rule decides") {
    ms[2]->freeze(/*process_dead=*/false);
    auto t0 = std::chrono::steady_clock::now();
    auto f0 = std::async(std::launch::async, [&] { return ms[0]->rendezvous(&g1[0]); });
    auto v1 = ms[1]->rendezvous(&g1[1]);
    f0.get();
    CHECK(v1.size == 2);
    CHECK(std::chrono::steady_clock::now() - t0 >= 600ms);  // waited for the heartbeat to go stale
  }
}

TEST_CASE("rank 0 deletes the keys of generations older than the previous two", "[rendezvous][cleanup]") {
  auto store = edl::make_memory_store();
  Membership a(store, opts("j8", "a", 2, 2));
  Membership b(store, opts("j8", "b", 2, 2));
  auto fb = std::async(std::launch::async, [&] { return b.rendezvous(nullptr); });
  GenerationView ga = a.rendezvous(nullptr), gb = fb.get();
  for (int i = 0; i < 5; ++i) {
    a.unwatch();
    b.unwatch();
    auto f2 = std::async(std::launch::async, [&] { return b.rendezvous(&gb); });
    ga = a.rendezvous(&ga);
    gb = f2.get();
    (ga.rank == 0 ? a : b).watch(ga.rank == 0 ? ga : gb, [](const std::string&) {});
  }
  REQUIRE(ga.id == 6);
  bool cleaned = false;
  for (int i = 0; i < 100 && !cleaned; ++i) {
    cleaned = store->keys("j8/g1/").empty() && store->keys("j8/g3/").empty();
    if (!cleaned) std::this_thread::sleep_for(10ms);
  }
  CHECK(cleaned);
  CHECK_FALSE(store->keys("j8/g4/").empty());  // the previous two are kept
  CHECK(store->get("j8/g6/members").has_value());
}

namespace {

// Counts the store operations issued by one thread (the rendezvous caller), not the lease thread.
class CountingStore final : public edl::Store {
 public:
  explicit CountingStore(std::shared_ptr<edl::Store> base) : base_(std::move(base)) {}
  void track_this_thread() { owner_ = std::this_thread::get_id(); }
  int ops() const { return ops_.load(); }
  void set(const std::string& k, const std::string& v) override { count(), base_->set(k, v); }
  std::optional<std::string> get(const std::string& k) override { return count(), base_->get(k); }
  int64_t add(const std::string& k, int64_t d) override { return count(), base_->add(k, d); }
  bool compare_set(const std::string& k, const std::optional<std::string>& e, const std::string& d,
                   std::optional<std::string>* c) override {
    return count(), base_->compare_set(k, e, d, c);
  }
  bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds t) override {
    return count(), base_->wait(keys, t);
  }
  std::optional<std::string> wait_change(const std::string& k, const std::optional<std::string>& known,
                                         std::chrono::milliseconds t) override {
    return count(), base_->wait_change(k, known, t);
  }
  bool del(const std::string& k) override { return count(), base_->del(k); }
  std::vector<std::string> keys(const std::string& p) override { return count(), base_->keys(p); }
  void set_lease(const std::string& k, const std::string& v, std::chrono::milliseconds ttl) override {
    count(), base_->set_lease(k, v, ttl);
  }

 private:
  void count() {
    if (std::this_thread::get_id() == owner_) ops_++;
  }
  std::shared_ptr<edl::Store> base_;
  std::thread::id owner_;
  std::atomic<int> ops_{0};
};

// Re-rendezvous of n members (fast path: all alive); returns (max ops of a non-decider, decider ops).
std::pair<int, int> rerendezvous_ops(int n, const std::string& job) {
  auto base = edl::make_memory_store();
  std::vector<std::shared_ptr<CountingStore>> stores;
  std::vector<std::unique_ptr<Membership>> ms;
  for (int i = 0; i < n; ++i) {
    stores.push_back(std::make_shared<CountingStore>(base));
    auto o = opts(job, "w" + std::to_string(i), n, n);
    ms.push_back(std::make_unique<Membership>(stores.back(), o));
  }
  std::vector<std::future<GenerationView>> f;
  for (int i = 0; i < n; ++i) f.push_back(std::async(std::launch::async, [&, i] { return ms[i]->rendezvous(nullptr); }));
  std::vector<GenerationView> g1;
  for (auto& x : f) g1.push_back(x.get());
  std::vector<int> before(n);
  std::vector<std::future<int>> f2;
  for (int i = 0; i < n; ++i)
    f2.push_back(std::async(std::launch::async, [&, i] {
      stores[i]->track_this_thread();
      int b = stores[i]->ops();
      ms[i]->rendezvous(&g1[i]);
      return stores[i]->ops() - b;
    }));
  std::vector<int> ops;
  for (auto& x : f2) ops.push_back(x.get());
  auto decider = base->get(job + "/g2/decider");
  REQUIRE(decider.has_value());
  int worst = 0, dec = 0;
  for (int i = 0; i < n; ++i) {
    if ("w" + std::to_string(i) == *decider) dec = ops[i];
    else worst = std::max(worst, ops[i]);
  }
  return {worst, dec};
}

}  // namespace

TEST_CASE("re-rendezvous costs O(1) store operations per worker", "[rendezvous][cost]") {
  auto small = rerendezvous_ops(3, "j9");
  auto large = rerendezvous_ops(12, "j10");
  INFO("n=3: worker " << small.first << " decider " << small.second << "; n=12: worker " << large.first
                      << " decider " << large.second);
  CHECK(large.first <= 8);              // heartbeat, seq, arrive (2), decider CAS, wait: no polling
  CHECK(large.first == small.first);    // independent of the world size
  // The decider: O(1) calls + one get per arrival, plus a few 50 ms liveness probes while members
  // are still arriving (timing-dependent): bounded, no runaway polling.
  CHECK(large.second <= 200);
}

// Issue 13 item 0: a worker killed after it arrived but before the decision must not be made a
// member (the others would wait for its lease). Leases here are 10 s: the dead worker's lease is
// still alive when the generation is decided, so only the liveness probe can have dropped it.
TEST_CASE("a worker killed after arriving is left out at decision time, its lease still alive", "[rendezvous][probe]") {
  auto store = edl::make_memory_store();
  auto long_lease = [](const std::string& job, const std::string& id, int min_np) {
    auto o = opts(job, id, min_np, 0);
    o.hostname = "hostA";  // one host: loopback probes are meaningful
    o.lease = 10000ms;
    o.rendezvous_grace = 5000ms;
    return o;
  };
  std::unique_ptr<Membership> victim;
  std::atomic<bool> armed{false};
  auto kill_after_arriving = [&](const std::string& point) {
    if (point == "rendezvous:arrived" && armed.load()) {
      victim->freeze(/*process_dead=*/true);  // what kill -9 does to its lease thread and probe socket
      throw std::runtime_error("killed after arriving");
    }
  };

  SECTION("first generation") {
    auto vo = long_lease("j11", "victim", 2);
    vo.fault = kill_after_arriving;
    victim = std::make_unique<Membership>(store, vo);
    armed = true;
    CHECK_THROWS(victim->rendezvous(nullptr));  // arrived first, then died
    REQUIRE(store->get("j11/g1/in/victim").has_value());
    Membership a(store, long_lease("j11", "a", 2)), b(store, long_lease("j11", "b", 2));
    auto fb = std::async(std::launch::async, [&] { return b.rendezvous(nullptr); });
    auto va = a.rendezvous(nullptr);
    auto vb = fb.get();
    CHECK(ids(va) == ids(vb));
    CHECK(va.size == 2);
    auto names = ids(va);
    CHECK(std::find(names.begin(), names.end(), "victim") == names.end());
    CHECK(store->get("j11/lease/victim").has_value());  // dropped by its probe, not by lease expiry
  }
  SECTION("later generation") {
    auto vo = long_lease("j12", "victim", 1);
    vo.fault = kill_after_arriving;
    victim = std::make_unique<Membership>(store, vo);
    Membership a(store, long_lease("j12", "a", 1)), b(store, long_lease("j12", "b", 1));
    auto fa = std::async(std::launch::async, [&] { return a.rendezvous(nullptr); });
    auto fb = std::async(std::launch::async, [&] { return b.rendezvous(nullptr); });
    auto g1v = victim->rendezvous(nullptr);
    auto g1a = fa.get(), g1b = fb.get();
    REQUIRE(g1a.size == 3);
    armed = true;
    CHECK_THROWS(victim->rendezvous(&g1v));  // arrives at round 2 first, then dies
    REQUIRE(store->get("j12/g2/in/victim").has_value());
    auto f2 = std::async(std::launch::async, [&] { return b.rendezvous(&g1b); });
    auto va = a.rendezvous(&g1a);
    auto vb = f2.get();
    CHECK(va.id == 2);
    CHECK(va.size == 2);
    CHECK(ids(va) == ids(vb));
    CHECK(store->get("j12/lease/victim").has_value());
    auto why = store->get("j12/g2/dropped/victim");
    REQUIRE(why.has_value());
    CHECK_THAT(*why, Catch::Contains("probe was refused"));
  }
}

TEST_CASE("a decider killed mid-decision is taken over through its probe, before its lease expires",
          "[rendezvous][probe][decider]") {
  auto store = edl::make_memory_store();
  std::vector<std::unique_ptr<Membership>> ms(3);
  std::atomic<bool> armed{false};
  std::atomic<int> killed{-1};
  for (int i = 0; i < 3; ++i) {
    auto o = opts("j13", "w" + std::to_string(i), 1, 0);
    o.lease = 10000ms;
    o.rendezvous_grace = 5000ms;
    o.fault = [&, i](const std::string& point) {
      int none = -1;
      if (point == "rendezvous:decide" && armed.load() && killed.compare_exchange_strong(none, i)) {
        ms[i]->freeze(/*process_dead=*/true);
        throw std::runtime_error("decider killed");
      }
    };
    ms[i] = std::make_unique<Membership>(store, o);
  }
  std::vector<std::future<GenerationView>> f;
  for (int i = 0; i < 3; ++i) f.push_back(std::async(std::launch::async, [&, i] { return ms[i]->rendezvous(nullptr); }));
  std::vector<GenerationView> g1;
  for (auto& x : f) g1.push_back(x.get());
  armed = true;
  std::vector<std::future<GenerationView>> f2;
  for (int i = 0; i < 3; ++i) f2.push_back(std::async(std::launch::async, [&, i] { return ms[i]->rendezvous(&g1[i]); }));
  std::vector<GenerationView> g2;
  for (int i = 0; i < 3; ++i) {
    try {
      g2.push_back(f2[i].get());
    } catch (const std::exception& e) {
      CHECK(std::string(e.what()) == "decider killed");
    }
  }
  REQUIRE(killed.load() >= 0);
  REQUIRE(g2.size() == 2);
  std::string dead = "w" + std::to_string(killed.load());
  CHECK(store->get("j13/lease/" + dead).has_value());  // taken over by the probe, not by lease expiry
  for (const auto& v : g2) {
    CHECK(v.id == 2);
    CHECK(v.size == 2);
    CHECK(ids(v) == ids(g2[0]));
  }
  auto decider = store->get("j13/g2/decider");
  REQUIRE(decider.has_value());
  CHECK(*decider != dead);
}

// Issue 13 item 2: liveness never compares one worker's wall clock with another's.
TEST_CASE("a worker whose wall clock is minutes behind is not evicted", "[rendezvous][clock]") {
  auto store = edl::make_memory_store();
  std::vector<std::unique_ptr<Membership>> ms;
  std::atomic<bool> delay{false};
  for (int i = 0; i < 3; ++i) {
    auto o = opts("j14", "w" + std::to_string(i), 1, 0);
    if (i == 2) {
      o.wall_clock_offset = std::chrono::minutes(-10);
      o.fault = [&](const std::string& point) {  // arrives late at round 2, heartbeating all along
        if (point == "rendezvous:arrive" && delay.load()) std::this_thread::sleep_for(400ms);
      };
    }
    ms.push_back(std::make_unique<Membership>(store, o));
  }
  std::vector<std::future<GenerationView>> f;
  for (int i = 0; i < 3; ++i) f.push_back(std::async(std::launch::async, [&, i] { return ms[i]->rendezvous(nullptr); }));
  std::vector<GenerationView> g1;
  for (auto& x : f) g1.push_back(x.get());
  std::promise<std::string> failure;
  std::atomic<bool> reported{false};
  ms[0]->watch(g1[0], [&](const std::string& r) {
    if (!reported.exchange(true)) failure.set_value(r);
  });
  std::this_thread::sleep_for(500ms);  // a few peer checks with the skewed lease in place
  ms[0]->unwatch();
  CHECK_FALSE(reported.load());
  delay = true;
  std::vector<std::future<GenerationView>> f2;
  for (int i = 0; i < 3; ++i) f2.push_back(std::async(std::launch::async, [&, i] { return ms[i]->rendezvous(&g1[i]); }));
  for (auto& x : f2) {
    auto v = x.get();
    CHECK(v.id == 2);
    CHECK(v.size == 3);  // the late, skewed worker was waited for, not judged dead by its stamp
  }
}
