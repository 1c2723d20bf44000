// The membership's cost as the job grows (docs/elastic.md, "Cost as the job grows") and liveness on
// a busy machine (issue 25): every member watches kWatchedPeers others; a worker's store requests per
// heartbeat and per rendezvous do not grow with the job (only the decider reads every arrival); the
// beat runs on its own thread and connection, so a slow store request never makes it late; a member
// that is slow to beat but alive is never dropped at a rendezvous. Ranks are threads over one
// memory store, each with its own counting view of it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "edl/store.h"
#include "elastic/membership.h"
#include "counting_store.h"

using namespace std::chrono_literals;
using edl::elastic::GenerationView;
using edl::elastic::kWatchedPeers;
using edl::elastic::Membership;
using edl::elastic::MembershipOptions;
using edl::elastic::watched_ranks;
using edl::elastic::testing::CountingStore;

namespace {

MembershipOptions opts(const std::string& job, const std::string& id, int np) {
  MembershipOptions o;
  o.job_id = job;
  o.worker_id = id;
  o.min_np = np;
  o.max_np = np;
  o.heartbeat = 100ms;
  o.lease = 1000ms;
  o.rendezvous_timeout = 20000ms;
  o.rendezvous_grace = 5000ms;
  o.start_window = 100ms;
  return o;
}

// n members over one memory store, each through its own CountingStore.
struct Job {
  Job(const std::string& job, int n) : base(edl::make_memory_store()) {
    for (int i = 0; i < n; ++i) {
      views.push_back(std::make_shared<CountingStore>(base));
      ms.push_back(std::make_unique<Membership>(views.back(), opts(job, "w" + std::to_string(i), n)));
    }
  }
  std::vector<GenerationView> rendezvous_all(const std::vector<GenerationView>* previous) {
    std::vector<std::future<GenerationView>> f;
    for (size_t i = 0; i < ms.size(); ++i)
      f.push_back(std::async(std::launch::async, [&, i] { return ms[i]->rendezvous(previous ? &(*previous)[i] : nullptr); }));
    std::vector<GenerationView> out;
    for (auto& x : f) out.push_back(x.get());
    return out;
  }
  std::shared_ptr<edl::Store> base;
  std::vector<std::shared_ptr<CountingStore>> views;
  std::vector<std::unique_ptr<Membership>> ms;
};

// The most requests any worker but the round's decider made, and the decider's.
std::pair<int64_t, int64_t> rendezvous_requests(Job& job, uint64_t round) {
  auto decider = job.base->get("j/g" + std::to_string(round) + "/decider");
  REQUIRE(decider);
  int64_t others = 0, mine = 0;
  for (size_t i = 0; i < job.ms.size(); ++i) {
    if ("w" + std::to_string(i) == *decider) mine = job.views[i]->ops();
    else others = std::max(others, job.views[i]->ops());
  }
  return {others, mine};
}

}  // namespace

TEST_CASE("every member is watched by kWatchedPeers others, never by itself", "[rendezvous][scale]") {
  for (int size = 1; size <= 40; ++size) {
    std::map<int, int> watchers;
    for (int r = 0; r < size; ++r) {
      auto w = watched_ranks(r, size);
      CHECK(static_cast<int>(w.size()) == std::min(kWatchedPeers, size - 1));
      CHECK(std::set<int>(w.begin(), w.end()).size() == w.size());
      for (int x : w) {
        CHECK(x != r);
        CHECK((x >= 0 && x < size));
        ++watchers[x];
      }
    }
    for (int r = 0; r < size && size > 1; ++r) CHECK(watchers[r] == std::min(kWatchedPeers, size - 1));
  }
}

// The first rendezvous (every worker a newcomer) and the watch; the re-rendezvous of survivors is
// bounded by "re-rendezvous costs O(1) store operations per worker" (rendezvous_test.cc).
TEST_CASE("a worker's store requests per rendezvous and per heartbeat do not grow with the job", "[rendezvous][scale]") {
  std::map<int, int64_t> per_rendezvous, per_check;
  for (int n : {4, 24}) {
    Job job("j", n);
    for (auto& v : job.views) v->reset();
    auto g1 = job.rendezvous_all(nullptr);
    auto [others, decider] = rendezvous_requests(job, 1);
    per_rendezvous[n] = others;
    INFO("n = " << n << ": decider " << decider << " requests, the others at most " << others);
    CHECK(others <= 20);  // arrive (3), one try at the decider key, a few waits and checks, the member list
    // The watch: over 10 heartbeats each worker reads at most kWatchedPeers leases per check.
    for (size_t i = 0; i < job.ms.size(); ++i) job.ms[i]->watch(g1[i], [](const std::string&) {});
    for (auto& v : job.views) v->reset();
    std::this_thread::sleep_for(1000ms);
    int64_t most = 0;
    for (auto& v : job.views) most = std::max(most, v->lease_reads());
    per_check[n] = most;
    CHECK(most <= 12 * kWatchedPeers);  // <= ~10 checks (+ slack for a late round) x the watched leases
    for (auto& m : job.ms) m->unwatch();
  }
  CHECK(per_rendezvous[24] <= per_rendezvous[4] + 6);
  CHECK(per_check[24] <= per_check[4] + 2 * kWatchedPeers);
}

TEST_CASE("a slow store request on the watch thread never delays the beat", "[rendezvous][scale][liveness]") {
  auto base = edl::make_memory_store();
  auto slow = std::make_shared<CountingStore>(base);
  auto oa = opts("j", "a", 2), ob = opts("j", "b", 2);
  oa.beat_store = base;  // the beat thread's own connection
  Membership a(slow, oa);
  Membership b(base, ob);
  auto fb = std::async(std::launch::async, [&] { return b.rendezvous(nullptr); });
  auto ga = a.rendezvous(nullptr);
  auto gb = fb.get();
  a.watch(ga, [](const std::string&) {});
  slow->slow_gets(1500ms);  // every read of a's watch thread now takes longer than the lease (1 s)
  auto end = std::chrono::steady_clock::now() + 3s;
  std::set<std::string> beats;
  bool lease_lost = false;
  while (std::chrono::steady_clock::now() < end) {
    auto v = base->get("j/lease/a");
    if (!v) lease_lost = true;
    else beats.insert(v->substr(0, v->find(' ')));
    std::this_thread::sleep_for(20ms);
  }
  slow->slow_gets(0ms);
  CHECK_FALSE(lease_lost);
  CHECK(beats.size() >= 15);  // ~30 heartbeats of 100 ms in 3 s
  a.unwatch();
}

TEST_CASE("a member slow to beat but alive is not dropped at a rendezvous", "[rendezvous][scale][liveness]") {
  Job job("j", 3);
  auto g1 = job.rendezvous_all(nullptr);
  // Worker 2 stops beating for 600 ms (6 heartbeats: a machine too busy to run its beat thread),
  // then arrives. Its lease (1 s) never expired and its probe accepts: it must stay a member.
  job.ms[2]->freeze();
  std::vector<std::future<GenerationView>> f;
  for (int i = 0; i < 2; ++i) f.push_back(std::async(std::launch::async, [&, i] { return job.ms[i]->rendezvous(&g1[i]); }));
  std::this_thread::sleep_for(600ms);
  job.ms[2]->thaw();
  auto v2 = job.ms[2]->rendezvous(&g1[2]);
  for (auto& x : f) CHECK(x.get().size == 3);
  CHECK(v2.size == 3);
  CHECK(job.base->keys("j/g2/dropped/").empty());
}
