// Rendezvous races, driven by hand through a store decorator (memory store, ranks as threads): a
// decision that lands between the end of a waiter's empty wait slice and its next look at
// <job>/gen. The waiter was admitted and must install the generation; the old code took the round
// for stale, waited as a newcomer for the next round, and the generation's other members waited for
// it to connect until the connect timeout (an ~8 s stall of a job's first generation).
#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <string>
#include <thread>

#include "edl/error.h"
#include "edl/store.h"
#include "elastic/membership.h"

using namespace std::chrono_literals;
using edl::elastic::GenerationView;
using edl::elastic::Membership;
using edl::elastic::MembershipOptions;

namespace {

MembershipOptions race_opts(const std::string& job, const std::string& id, int min_np, int max_np) {
  MembershipOptions o;
  o.job_id = job;
  o.worker_id = id;
  o.hostname = "hostA";
  o.min_np = min_np;
  o.max_np = max_np;
  o.heartbeat = 100ms;
  o.lease = 1000ms;
  o.rendezvous_timeout = 5000ms;
  o.rendezvous_grace = 5000ms;
  o.start_window = 100ms;
  return o;
}

// Forwards to `base`, except that the first wait for `<job>/g<round>/members` to appear ends empty
// only once the decision is published (a wait slice that timed out just before the decision landed).
// A worker that then arrives at a later round (as a newcomer) marks the job finished, so that the
// old behaviour ends in JobFinished at once instead of waiting for a generation nobody decides.
class LateDecisionStore final : public edl::Store {
 public:
  LateDecisionStore(std::shared_ptr<edl::Store> base, std::string job, uint64_t round)
      : base_(std::move(base)), job_(std::move(job)), round_(round) {}
  bool went_to_next_round() const { return next_round_.load(); }
  bool raced() const { return raced_.load(); }

  void set(const std::string& k, const std::string& v) override {
    base_->set(k, v);
    if (k.rfind(job_ + "/g" + std::to_string(round_ + 1) + "/in/", 0) == 0) {
      next_round_ = true;
      base_->set(job_ + "/finished", std::to_string(round_));
    }
  }
  std::optional<std::string> get(const std::string& k) override { return base_->get(k); }
  int64_t add(const std::string& k, int64_t d) override { return base_->add(k, d); }
  bool compare_set(const std::string& k, const std::optional<std::string>& e, const std::string& d,
                   std::optional<std::string>* c) override {
    return base_->compare_set(k, e, d, c);
  }
  bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds t) override { return base_->wait(keys, t); }
  std::optional<std::string> wait_change(const std::string& k, const std::optional<std::string>& known,
                                         std::chrono::milliseconds t) override {
    const bool target = k == job_ + "/g" + std::to_string(round_) + "/members" && !known;
    if (!target || raced_.exchange(true)) return base_->wait_change(k, known, t);
    // Hold this slice until the decision is published, <job>/gen included (the decider needs no
    // more from this worker: it arrived before the slice began), then report the slice as empty.
    const std::string gen = job_ + "/gen";
    for (auto g = base_->get(gen); !g || std::stoull(*g) < round_;) g = base_->wait_change(gen, g, 1000ms);
    return known;
  }
  bool del(const std::string& k) override { return base_->del(k); }
  std::vector<std::string> keys(const std::string& p) override { return base_->keys(p); }
  void set_lease(const std::string& k, const std::string& v, std::chrono::milliseconds ttl) override {
    base_->set_lease(k, v, ttl);
  }

 private:
  std::shared_ptr<edl::Store> base_;
  const std::string job_;
  const uint64_t round_;
  std::atomic<bool> next_round_{false}, raced_{false};
};

// Waits until `key` exists: the other worker won the election of the round, so the one started
// next is a waiter (a decider takes its own decision without waiting for it).
void await_key(edl::Store& store, const std::string& key) {
  for (int i = 0; i < 500 && !store.get(key); ++i) std::this_thread::sleep_for(10ms);
  REQUIRE(store.get(key).has_value());
}

std::vector<std::string> member_ids(const GenerationView& v) {
  std::vector<std::string> out;
  for (const auto& m : v.members) out.push_back(m.id);
  return out;
}

}  // namespace

TEST_CASE("a first-round decision landing right after a waiter's empty slice still admits the waiter",
          "[rendezvous][race]") {
  auto base = edl::make_memory_store();
  auto racy = std::make_shared<LateDecisionStore>(base, "jr1", 1);
  Membership a(base, race_opts("jr1", "a", 2, 2));
  Membership b(racy, race_opts("jr1", "b", 2, 2));
  // a decides; b's first wait for the decision ends empty just after the decision landed.
  auto fa = std::async(std::launch::async, [&] { return a.rendezvous(nullptr); });
  await_key(*base, "jr1/g1/decider");
  auto fb = std::async(std::launch::async, [&] { return b.rendezvous(nullptr); });
  GenerationView va = fa.get();
  GenerationView vb;
  REQUIRE_NOTHROW(vb = fb.get());  // the old code: b went on to round 2 as a newcomer (JobFinished here)
  CHECK(racy->raced());
  CHECK_FALSE(racy->went_to_next_round());
  CHECK(va.id == 1);
  CHECK(vb.id == 1);
  CHECK(va.size == 2);
  CHECK(vb.size == 2);
  CHECK(member_ids(vb) == member_ids(va));
  CHECK(va.rank != vb.rank);
  CHECK(vb.members[vb.rank].id == "b");
}

TEST_CASE("a later-round decision landing right after a member's empty slice still admits the member",
          "[rendezvous][race]") {
  auto base = edl::make_memory_store();
  auto racy = std::make_shared<LateDecisionStore>(base, "jr2", 2);
  Membership a(base, race_opts("jr2", "a", 1, 0));
  Membership b(racy, race_opts("jr2", "b", 1, 0));
  auto fa = std::async(std::launch::async, [&] { return a.rendezvous(nullptr); });
  auto fb = std::async(std::launch::async, [&] { return b.rendezvous(nullptr); });
  GenerationView a1 = fa.get(), b1 = fb.get();
  REQUIRE(a1.size == 2);
  REQUIRE(b1.size == 2);
  // Both re-rendezvous as members (e.g. a batch boundary that changes membership).
  auto fa2 = std::async(std::launch::async, [&] { return a.rendezvous(&a1); });
  await_key(*base, "jr2/g2/decider");
  auto fb2 = std::async(std::launch::async, [&] { return b.rendezvous(&b1); });
  GenerationView a2 = fa2.get();
  GenerationView b2;
  REQUIRE_NOTHROW(b2 = fb2.get());
  CHECK(racy->raced());
  CHECK_FALSE(racy->went_to_next_round());
  CHECK(a2.id == 2);
  CHECK(b2.id == 2);
  CHECK(member_ids(a2) == member_ids(a1));  // survivors keep their order
  CHECK(member_ids(b2) == member_ids(a2));
}

TEST_CASE("a member that arrives at the next rendezvous instead of connecting fails the generation at once",
          "[rendezvous][race]") {
  // Whatever made it leave (e.g. the race above), a member of G that is waiting at G+1 will never
  // connect to G: the members still connecting abort G instead of waiting for the connect timeout.
  auto store = edl::make_memory_store();
  Membership a(store, race_opts("jr3", "a", 2, 2));
  Membership b(store, race_opts("jr3", "b", 2, 2));
  auto fa = std::async(std::launch::async, [&] { return a.rendezvous(nullptr); });
  auto fb = std::async(std::launch::async, [&] { return b.rendezvous(nullptr); });
  GenerationView va = fa.get();
  fb.get();
  std::promise<std::string> failed;
  std::atomic<bool> once{false};
  a.watch(va, [&](const std::string& why) {
    if (!once.exchange(true)) failed.set_value(why);
  });
  store->set("jr3/g2/in/b", "99 hostA");  // b arrived at round 2 (it stays alive: its lease runs)
  auto f = failed.get_future();
  REQUIRE(f.wait_for(20s) == std::future_status::ready);  // hang guard only: a heartbeat is 100 ms
  std::string why = f.get();
  CHECK(why.find("worker b") != std::string::npos);
  CHECK(why.find("arrived at the rendezvous of generation 2") != std::string::npos);
  CHECK(store->get("jr3/g1/abort").has_value());
  a.unwatch();
}
