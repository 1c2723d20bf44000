// A survivor's arrival prepared before the boundary of a stop-free join (Membership::prepare_arrival,
// docs/elastic.md "Stop-free joins", step 3): taken by the rendezvous, voided by a failure, and the
// decider's fast pass when every survivor is in. Membership on a memory store, ranks as threads.
#include <catch2/catch.hpp>

#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "edl/store.h"
#include "elastic/member_list.h"
#include "elastic/membership.h"
#include "counting_store.h"

using namespace std::chrono_literals;
using edl::elastic::ChangeReason;
using edl::elastic::GenerationView;
using edl::elastic::Membership;
using edl::elastic::MembershipOptions;
using edl::elastic::testing::CountingStore;

namespace {

MembershipOptions opts(const std::string& job, const std::string& id) {
  MembershipOptions o;
  o.job_id = job;
  o.worker_id = id;
  o.min_np = 1;
  o.heartbeat = 100ms;
  o.lease = 1000ms;
  o.rendezvous_timeout = 2000ms;
  o.rendezvous_grace = 5000ms;  // long: a test that ends fast did not wait for it
  o.start_window = 100ms;
  return o;
}

struct Job {
  std::shared_ptr<edl::Store> base = edl::make_memory_store();
  std::vector<std::shared_ptr<CountingStore>> stores;
  std::vector<std::unique_ptr<Membership>> ms;
  std::vector<GenerationView> g1;

  Job(const std::string& job, int n) {
    for (int i = 0; i < n; ++i) {
      stores.push_back(std::make_shared<CountingStore>(base));
      ms.push_back(std::make_unique<Membership>(stores.back(), opts(job, "w" + std::to_string(i))));
    }
    std::vector<std::future<GenerationView>> f;
    for (int i = 0; i < n; ++i) f.push_back(std::async(std::launch::async, [this, i] { return ms[i]->rendezvous(nullptr); }));
    for (auto& x : f) g1.push_back(x.get());
  }

  // Waits until `key` exists (a prepared arrival is written by a thread of its own).
  bool appears(const std::string& key) {
    for (int i = 0; i < 200; ++i) {
      if (base->get(key)) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }
};

}  // namespace

TEST_CASE("a survivor's prepared arrival is written in the background and taken by the next rendezvous",
          "[rendezvous][stopfree]") {
  Job job("pa1", 3);
  // A newcomer asks to join generation 2; the survivors prepare their arrivals before the boundary.
  auto newcomer = std::make_unique<Membership>(job.base, opts("pa1", "new"));
  auto fn = std::async(std::launch::async, [&] { return newcomer->rendezvous(nullptr); });
  for (int i = 0; i < 3; ++i) {
    job.ms[i]->prepare_arrival(2);
    CHECK(job.ms[i]->prepared_for(2));
    CHECK_FALSE(job.ms[i]->prepared_for(3));
  }
  for (int i = 0; i < 3; ++i) REQUIRE(job.appears("pa1/g2/in/w" + std::to_string(i)));
  REQUIRE(job.appears("pa1/g2/in/new"));
  // At the boundary the rendezvous arrives no more: a survivor's own requests are the wait for the
  // decision (the decider's: its decision).
  std::vector<std::future<std::pair<GenerationView, int64_t>>> f;
  for (int i = 0; i < 3; ++i)
    f.push_back(std::async(std::launch::async, [&, i] {
      job.stores[i]->track_this_thread();
      const int64_t before = job.stores[i]->ops();
      GenerationView v = job.ms[i]->rendezvous(&job.g1[i]);
      return std::make_pair(v, job.stores[i]->ops() - before);
    }));
  const auto decider = [&] {
    for (int i = 0; i < 200 && !job.base->get("pa1/g2/decider"); ++i) std::this_thread::sleep_for(10ms);
    return job.base->get("pa1/g2/decider").value_or("");
  };
  std::vector<std::string> order;
  for (const auto& m : job.g1[0].members) order.push_back(m.id);
  order.push_back("new");
  const std::string d = decider();
  for (int i = 0; i < 3; ++i) {
    auto [v, ops] = f[i].get();
    CHECK(v.id == 2);
    CHECK(v.rank == job.g1[i].rank);  // survivors keep their ranks
    CHECK(v.size == 4);
    CHECK(v.previous_size == 3);
    CHECK(v.reason == ChangeReason::kJoin);
    std::vector<std::string> got;
    for (const auto& m : v.members) got.push_back(m.id);
    CHECK(got == order);
    INFO("worker w" << i << " made " << ops << " store requests");
    // The wait for the decision (1 request; an empty 200 ms slice on a loaded machine adds 5 checks),
    // where an arrival at the boundary makes 7 (lease, finished check, 3 to arrive, election, wait).
    if ("w" + std::to_string(i) != d) CHECK(ops <= 6);
  }
  CHECK(fn.get().rank == 3);
  // Each survivor arrived once: three survivors and the newcomer.
  CHECK(edl::elastic::parse_store_int(job.base->get("pa1/g2/n")) == 4);
}

TEST_CASE("a discarded prepared arrival is made again by the rendezvous (a failure before the boundary)",
          "[rendezvous][stopfree]") {
  Job job("pa2", 2);
  job.ms[0]->prepare_arrival(2);
  REQUIRE(job.appears("pa2/g2/in/w0"));
  job.ms[0]->discard_prepared();
  CHECK_FALSE(job.ms[0]->prepared_for(2));
  std::vector<std::future<GenerationView>> f;
  for (int i = 0; i < 2; ++i) f.push_back(std::async(std::launch::async, [&, i] { return job.ms[i]->rendezvous(&job.g1[i]); }));
  for (int i = 0; i < 2; ++i) {
    auto v = f[i].get();
    CHECK(v.id == 2);
    CHECK(v.size == 2);
    CHECK(v.rank == job.g1[i].rank);
  }
  // w0 arrived twice (prepared, then again after the discard), w1 once.
  CHECK(edl::elastic::parse_store_int(job.base->get("pa2/g2/n")) == 3);
}

TEST_CASE("a prepared arrival is not used for another round or another note", "[rendezvous][stopfree]") {
  Job job("pa3", 2);
  job.ms[0]->prepare_arrival(5);  // not the next round: ignored by the rendezvous of round 2
  job.ms[1]->set_arrival_note("c7.0.64");
  job.ms[1]->prepare_arrival(2);
  REQUIRE(job.appears("pa3/g2/in/w1"));
  job.ms[1]->set_arrival_note("c8.0.64");  // its commit moved after the arrival: it arrives again
  std::vector<std::future<GenerationView>> f;
  for (int i = 0; i < 2; ++i) f.push_back(std::async(std::launch::async, [&, i] { return job.ms[i]->rendezvous(&job.g1[i]); }));
  for (int i = 0; i < 2; ++i) CHECK(f[i].get().id == 2);
  auto mine = job.base->get("pa3/g2/in/w1");
  REQUIRE(mine.has_value());
  CHECK(mine->find("c8.0.64") != std::string::npos);  // the note of the boundary, not the prepared one
}

TEST_CASE("a member asked to leave after its arrival was prepared is still admitted, and can leave from there",
          "[rendezvous][stopfree]") {
  Job job("pa4", 2);
  for (int i = 0; i < 2; ++i) job.ms[i]->prepare_arrival(2);
  for (int i = 0; i < 2; ++i) REQUIRE(job.appears("pa4/g2/in/w" + std::to_string(i)));
  job.ms[1]->request_leave();  // SIGTERM between the prepared arrival and the boundary
  std::vector<std::future<GenerationView>> f;
  for (int i = 0; i < 2; ++i) f.push_back(std::async(std::launch::async, [&, i] { return job.ms[i]->rendezvous(&job.g1[i]); }));
  for (int i = 0; i < 2; ++i) {
    auto v = f[i].get();  // no LeftBeforeAdmission: the decision may list it
    CHECK(v.id == 2);
    CHECK(v.size == 2);
  }
}

TEST_CASE("a discarded preparation that won the decider election still decides the round", "[rendezvous][stopfree]") {
  Job job("pa5", 2);
  job.ms[0]->prepare_arrival(2);
  REQUIRE(job.appears("pa5/g2/decider"));
  CHECK(job.base->get("pa5/g2/decider").value_or("") == "w0");
  job.ms[0]->discard_prepared();  // a failure before the boundary: the election stands, the rendezvous must decide
  std::vector<std::future<GenerationView>> f;
  for (int i = 0; i < 2; ++i) f.push_back(std::async(std::launch::async, [&, i] { return job.ms[i]->rendezvous(&job.g1[i]); }));
  for (int i = 0; i < 2; ++i) {
    REQUIRE(f[i].wait_for(20s) == std::future_status::ready);
    auto v = f[i].get();
    CHECK(v.id == 2);
    CHECK(v.size == 2);
  }
}

TEST_CASE("a decider elected by its preparation that dies before the boundary is taken over",
          "[rendezvous][stopfree][probe]") {
  Job job("pa6", 3);
  job.ms[0]->prepare_arrival(2);
  REQUIRE(job.appears("pa6/g2/decider"));
  for (int i = 1; i < 3; ++i) job.ms[i]->prepare_arrival(2);
  for (int i = 1; i < 3; ++i) REQUIRE(job.appears("pa6/g2/in/w" + std::to_string(i)));
  job.ms[0]->freeze(/*process_dead=*/true);  // kill -9 of the elected decider: its probe is refused
  std::vector<std::future<GenerationView>> f;
  for (int i = 1; i < 3; ++i) {
    job.ms[i]->discard_prepared();  // the survivors see the failure and re-form
    f.push_back(std::async(std::launch::async, [&, i] { return job.ms[i]->rendezvous(&job.g1[i]); }));
  }
  for (auto& x : f) {
    REQUIRE(x.wait_for(20s) == std::future_status::ready);
    auto v = x.get();
    CHECK(v.id == 2);
    CHECK(v.size == 2);  // the dead decider is left out
    for (const auto& m : v.members) CHECK(m.id != "w0");
  }
  CHECK(job.base->get("pa6/g2/decider").value_or("") != "w0");
}
