// Silence by observed beats: SilenceTracker on a hand-driven clock, and Membership over a store whose
// leases outlive their TTL by far (as etcd's may: whole seconds, restarted by a leader change).
#include <catch2/catch.hpp>

#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "edl/store.h"
#include "elastic/membership.h"
#include "elastic/silence.h"

using namespace std::chrono_literals;
using edl::elastic::Membership;
using edl::elastic::MembershipOptions;
using edl::elastic::SilenceOptions;
using edl::elastic::SilenceTracker;
using Clock = std::chrono::steady_clock;

namespace {

std::vector<std::string> ids(const std::vector<std::pair<std::string, std::chrono::milliseconds>>& v) {
  std::vector<std::string> out;
  for (const auto& p : v) out.push_back(p.first);
  return out;
}

// A store whose leases last 20 x their TTL, and whose every call can be held (an outage of the store
// for every client at once: an etcd election, a store restart).
class LaggingStore final : public edl::Store {
 public:
  explicit LaggingStore(std::shared_ptr<edl::Store> base) : base_(std::move(base)) {}
  void hold(bool on) {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = on;
    cv_.notify_all();
  }
  void set(const std::string& k, const std::string& v) override { gate(), base_->set(k, v); }
  std::optional<std::string> get(const std::string& k) override { return gate(), base_->get(k); }
  int64_t add(const std::string& k, int64_t d) override { return gate(), base_->add(k, d); }
  bool compare_set(const std::string& k, const std::optional<std::string>& e, const std::string& d,
                   std::optional<std::string>* cur) override {
    return gate(), base_->compare_set(k, e, d, cur);
  }
  bool wait(const std::vector<std::string>& k, std::chrono::milliseconds t) override { return gate(), base_->wait(k, t); }
  std::optional<std::string> wait_change(const std::string& k, const std::optional<std::string>& known,
                                         std::chrono::milliseconds t) override {
    return gate(), base_->wait_change(k, known, t);
  }
  bool del(const std::string& k) override { return gate(), base_->del(k); }
  std::vector<std::string> keys(const std::string& p) override { return gate(), base_->keys(p); }
  void set_lease(const std::string& k, const std::string& v, std::chrono::milliseconds ttl) override {
    gate(), base_->set_lease(k, v, 20 * ttl);
  }

 private:
  void gate() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !held_; });
  }
  std::shared_ptr<edl::Store> base_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false;
};

MembershipOptions opts(const std::string& id) {
  MembershipOptions o;
  o.job_id = "silence";
  o.worker_id = id;
  o.hostname = "host-" + id;
  o.min_np = 2;
  o.max_np = 2;
  o.heartbeat = 100ms;
  o.lease = 3000ms;  // recovery after an interruption: max(2 heartbeats, lease / 3) = 1 s
  o.rendezvous_timeout = 5000ms;
  o.start_window = 100ms;
  return o;
}

}  // namespace

TEST_CASE("silence: a member whose value keeps changing is never silent", "[liveness][silence]") {
  SilenceTracker t(SilenceOptions{1000ms, 500ms, 700ms});
  auto t0 = Clock::now();
  for (int i = 0; i < 40; ++i) CHECK(t.observe({{"a", std::to_string(i)}}, t0 + i * 250ms).empty());
}

TEST_CASE("silence: unchanged for the lease since first seen = silent, not earlier", "[liveness][silence]") {
  SilenceTracker t(SilenceOptions{1000ms, 500ms, 700ms});
  auto t0 = Clock::now();
  CHECK(t.observe({{"a", "1"}, {"b", "1"}}, t0).empty());
  CHECK(t.observe({{"a", "1"}, {"b", "2"}}, t0 + 400ms).empty());
  CHECK(t.observe({{"a", "1"}, {"b", "3"}}, t0 + 800ms).empty());
  auto s = t.observe({{"a", "1"}, {"b", "3"}}, t0 + 1000ms);  // a: 1000 ms unchanged; b: 200 ms
  REQUIRE(ids(s) == std::vector<std::string>{"a"});
  CHECK(s[0].second == 1000ms);
  CHECK(ids(t.observe({{"a", "1"}, {"b", "3"}}, t0 + 1300ms)) == std::vector<std::string>{"a"});  // b: 500 ms
  CHECK(ids(t.observe({{"a", "1"}, {"b", "3"}}, t0 + 1700ms)) == std::vector<std::string>{"a"});  // b: 900 ms
  CHECK(ids(t.observe({{"a", "1"}, {"b", "3"}}, t0 + 1800ms)) == std::vector<std::string>{"a", "b"});
}

TEST_CASE("silence: after an interruption of the observer's own rounds every member gets the recovery time",
          "[liveness][silence]") {
  SilenceTracker t(SilenceOptions{1000ms, 500ms, 700ms});
  auto t0 = Clock::now();
  CHECK(t.observe({{"a", "1"}, {"b", "1"}}, t0).empty());
  CHECK(t.observe({{"a", "1"}, {"b", "1"}}, t0 + 400ms).empty());
  // The next round ends 2 s later (our reads hung: the store was away for everyone).
  CHECK(t.observe({{"a", "1"}, {"b", "1"}}, t0 + 2400ms).empty());   // unchanged 2.4 s, but just recovered
  CHECK(t.observe({{"a", "1"}, {"b", "2"}}, t0 + 2800ms).empty());   // b's beat got through: alive
  auto s = t.observe({{"a", "1"}, {"b", "2"}}, t0 + 3100ms);         // 700 ms after the interruption
  CHECK(ids(s) == std::vector<std::string>{"a"});
}

// Rounds served from watch streams are never late; the observer's own late beats say the store was
// too busy for everyone's (Membership calls interrupted()): the same recovery time as a late round.
TEST_CASE("silence: an interruption reported by the observer restarts the recovery time", "[liveness][silence]") {
  SilenceTracker t(SilenceOptions{1000ms, 500ms, 700ms});
  auto t0 = Clock::now();
  for (int i = 0; i <= 3; ++i) CHECK(t.observe({{"a", "1"}}, t0 + i * 250ms).empty());
  t.interrupted(t0 + 800ms);  // our own beats were late
  CHECK(t.observe({{"a", "1"}}, t0 + 1000ms).empty());  // unchanged for the lease, 200 ms after it
  CHECK(t.observe({{"a", "1"}}, t0 + 1250ms).empty());
  CHECK(ids(t.observe({{"a", "1"}}, t0 + 1500ms)) == std::vector<std::string>{"a"});  // 700 ms after it
}

TEST_CASE("silence: a member that leaves the read set and comes back is judged afresh, and reset forgets", "[liveness][silence]") {
  SilenceTracker t(SilenceOptions{1000ms, 500ms, 700ms});
  auto t0 = Clock::now();
  CHECK(t.observe({{"a", "1"}}, t0).empty());
  CHECK(t.observe({}, t0 + 400ms).empty());
  CHECK(t.observe({{"a", "1"}}, t0 + 800ms).empty());
  CHECK(t.observe({{"a", "1"}}, t0 + 1200ms).empty());  // seen again at 800 ms: 400 ms
  CHECK(t.observe({{"a", "1"}}, t0 + 1600ms).empty());  // 800 ms
  CHECK(ids(t.observe({{"a", "1"}}, t0 + 1800ms)) == std::vector<std::string>{"a"});
  CHECK(t.first_seen("a", "1") == t0 + 800ms);
  CHECK_FALSE(t.first_seen("a", "2").has_value());
  t.reset();
  CHECK_FALSE(t.first_seen("a", "1").has_value());
  CHECK(t.observe({{"a", "1"}}, t0 + 2200ms).empty());
}

TEST_CASE("a stopped member is reported by its beats although the store keeps its lease for 20x its TTL",
          "[rendezvous][liveness][silence]") {
  auto store = std::make_shared<LaggingStore>(edl::make_memory_store());
  Membership a(store, opts("a"));
  Membership b(store, opts("b"));
  auto fb = std::async(std::launch::async, [&] { return b.rendezvous(nullptr); });
  auto ga = a.rendezvous(nullptr);
  auto gb = fb.get();
  std::promise<std::string> reason;
  a.watch(ga, [&](const std::string& r) { reason.set_value(r); });

  SECTION("an outage of the store for everyone is not a silence") {
    store->hold(true);
    std::this_thread::sleep_for(7000ms);  // over 2 leases without a beat reaching the store
    store->hold(false);
    auto fut = reason.get_future();
    // After the outage b's beats get through at once; a gives it the recovery time (1 s) first.
    CHECK(fut.wait_for(3000ms) == std::future_status::timeout);
    b.freeze();  // now b really stops: reported by its beats (its lease lives 60 s in the store)
    REQUIRE(fut.wait_for(15s) == std::future_status::ready);
    CHECK_THAT(fut.get(), Catch::Contains("worker b") && Catch::Contains("no new beat"));
  }
  SECTION("a stopped member") {
    b.freeze();  // SIGSTOP: the store would expire its lease only after 60 s
    auto fut = reason.get_future();
    REQUIRE(fut.wait_for(15s) == std::future_status::ready);
    CHECK_THAT(fut.get(), Catch::Contains("worker b") && Catch::Contains("lease expired") &&
                              Catch::Contains("no new beat"));
  }
  a.unwatch();
}
