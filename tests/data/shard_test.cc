// ShardGenerator: shuffle determinism, epoch boundaries, exactly-once accounting under random kills,
// joins and graceful leaves (testing/shard_sim.h), resume from a checkpoint, bad input.
#include <catch2/catch.hpp>

#include <set>

#include "testing/shard_sim.h"
#include "data/test_files.h"
#include "edl/data.h"
#include "edl/error.h"

using namespace edl::data;
using Catch::Matchers::Contains;

namespace {

ShardOptions opts(uint64_t records, uint64_t rps, uint64_t batch, const std::string& worker = "w0") {
  ShardOptions o;
  o.records = records;
  o.records_per_shard = rps;
  o.batch_size = batch;
  o.seed = 11;
  o.worker_id = worker;
  return o;
}

void check_audit(const edl::testing::SimResult& r, int epochs, uint64_t records) {
  INFO("kills " << r.kills << " joins " << r.joins << " leaves " << r.leaves << " partial commits "
                << r.partial_commits << " steps " << r.steps);
  REQUIRE(r.error.empty());
  REQUIRE(r.epochs.size() == static_cast<size_t>(epochs));
  for (const auto& e : r.epochs) {
    INFO("epoch " << e.epoch);
    CHECK(e.records == records);
    CHECK(e.trained_once == records);
    CHECK(e.trained_twice == 0);
    CHECK(e.never == 0);
  }
}

}  // namespace

TEST_CASE("shard order and record order are deterministic from the seed", "[data][shards]") {
  auto store = edl::make_memory_store();
  ShardGenerator a(store, opts(1000, 64, 8)), b(edl::make_memory_store(), opts(1000, 64, 8));
  auto other = opts(1000, 64, 8);
  other.seed = 12;
  ShardGenerator c(store, other);
  REQUIRE(a.num_shards() == 16);
  CHECK(a.shard_order(0) == b.shard_order(0));
  CHECK(a.shard_order(1) == b.shard_order(1));
  CHECK(a.shard_order(0) != a.shard_order(1));
  CHECK(a.shard_order(0) != c.shard_order(0));
  auto order = a.shard_order(2);
  CHECK(std::set<uint64_t>(order.begin(), order.end()).size() == 16);
  CHECK(a.shard_records(0, 3) == b.shard_records(0, 3));
  CHECK(a.shard_records(0, 3) != a.shard_records(1, 3));
  auto last = a.shard_records(0, 15);  // 1000 = 15 * 64 + 40
  CHECK(last.size() == 40);
  CHECK(std::set<uint64_t>(last.begin(), last.end()) == std::set<uint64_t>{[] {
          std::set<uint64_t> s;
          for (uint64_t i = 960; i < 1000; ++i) s.insert(i);
          return s;
        }()});
  CHECK_THROWS_AS(a.shard_records(0, 16), edl::InvalidArgument);
}

TEST_CASE("one worker trains every record once per epoch, shards in the shuffled order", "[data][shards]") {
  auto o = opts(300, 50, 16);
  o.epochs = 2;
  ShardGenerator g(edl::make_memory_store(), o);
  std::vector<std::vector<int>> seen(2, std::vector<int>(300, 0));
  std::vector<int64_t> shard_seq;
  for (int i = 0; i < 1000; ++i) {
    StepRecords s = g.next();
    if (s.end_of_data) break;
    REQUIRE_FALSE(s.records.empty());
    CHECK(s.records.size() <= 16);
    for (uint64_t r : s.records) ++seen[s.epoch][r];
    if (shard_seq.empty() || shard_seq.back() != s.shard) shard_seq.push_back(s.shard);
  }
  CHECK(g.next().end_of_data);
  for (auto& e : seen)
    for (int c : e) REQUIRE(c == 1);
  auto order0 = g.shard_order(0), order1 = g.shard_order(1);
  std::vector<int64_t> want(order0.begin(), order0.end());
  want.insert(want.end(), order1.begin(), order1.end());
  CHECK(shard_seq == want);
}

TEST_CASE("a worker without a shard waits for the epoch to end", "[data][shards]") {
  auto store = edl::make_memory_store();
  ShardGenerator a(store, opts(10, 10, 4, "a")), b(store, opts(10, 10, 4, "b"));
  StepRecords sa = a.next(), sb = b.next();  // step 0: a claims the only shard
  CHECK(sa.records.size() == 4);
  CHECK(sb.records.empty());
  CHECK(sb.shard == -1);
  CHECK(sb.epoch == 0);
  sa = a.next();
  sb = b.next();  // step 1: a at offset 4
  CHECK(sa.offset == 4);
  CHECK(sb.records.empty());
  sa = a.next();
  sb = b.next();  // step 2: a takes the last 2 records
  CHECK(sa.records.size() == 2);
  CHECK(sb.records.empty());
  sb = b.next();  // step 3: epoch 0 is exhausted: b is first to claim in epoch 1
  sa = a.next();
  CHECK(sb.epoch == 1);
  CHECK(sb.records.size() == 4);
  CHECK(sa.epoch == 1);
  CHECK(sa.records.empty());
}

TEST_CASE("exactly once per epoch under random kills, joins and leaves", "[data][shards][elastic]") {
  for (uint64_t seed : {1, 2, 3, 4, 5, 6}) {
    edl::testing::SimOptions o;
    o.seed = seed;
    o.records = 600 + 37 * seed;
    o.records_per_shard = 20 + seed * 3;
    o.events = 12;
    o.commit_every = 1 + static_cast<int>(seed % 4);
    edl::testing::Simulation sim(o);
    auto r = sim.run();
    INFO("seed " << seed);
    check_audit(r, o.epochs, o.records);
    CHECK(r.kills + r.joins + r.leaves == 12);
  }
}

TEST_CASE("exactly once under a storm of events with sparse commits", "[data][shards][elastic]") {
  int partial_commits = 0;
  for (uint64_t seed : {31, 32, 33}) {
    edl::testing::SimOptions o;
    o.seed = seed;
    o.records = 900;
    o.records_per_shard = 25;
    o.events = 60;
    o.commit_every = 3;
    o.max_workers = 6;
    edl::testing::Simulation sim(o);
    auto r = sim.run();
    INFO("seed " << seed);
    check_audit(r, o.epochs, o.records);
    CHECK(r.kills > 5);
    partial_commits += r.partial_commits;
  }
  CHECK(partial_commits > 0);  // survivors that disagreed on the last commit were synced
}

TEST_CASE("exactly once with members drawing concurrently from threads", "[data][shards][elastic]") {
  for (uint64_t seed : {21, 22}) {
    edl::testing::SimOptions o;
    o.seed = seed;
    o.records = 500;
    o.records_per_shard = 16;
    o.initial_workers = 5;
    o.threads = true;
    o.events = 10;
    edl::testing::Simulation sim(o);
    auto r = sim.run();
    INFO("seed " << seed);
    check_audit(r, o.epochs, o.records);
  }
}

TEST_CASE("a whole-job restart from a checkpoint continues the epoch where it was", "[data][shards][checkpoint]") {
  const uint64_t N = 200;
  auto o = opts(N, 30, 7);
  o.epochs = 1;
  std::vector<int> count(N, 0);
  std::string snapshot;
  {
    auto store = edl::make_memory_store();
    auto o1 = o, o2 = o;
    o1.worker_id = "a";
    o2.worker_id = "b";
    o2.batch_size = 5;
    ShardGenerator a(store, o1), b(store, o2);
    for (int step = 0; step < 9; ++step) {
      for (uint64_t r : a.next().records) ++count[r];
      for (uint64_t r : b.next().records) ++count[r];
    }
    snapshot = a.save();
    CHECK(b.save() == snapshot);  // every member commits the same table
    // Work after the checkpoint is lost with the job.
    a.next();
    b.next();
  }
  // A new job: fresh store, new workers (a different count and batch size), the persisted snapshot.
  auto store = edl::make_memory_store();
  std::vector<std::unique_ptr<ShardGenerator>> ws;
  for (int i = 0; i < 3; ++i) {
    auto oi = o;
    oi.worker_id = "n" + std::to_string(i);
    oi.batch_size = 4 + i;
    ws.push_back(std::make_unique<ShardGenerator>(store, oi));
    ws.back()->load(snapshot);
    edl::elastic::GenerationInfo info;
    info.generation = 1;
    info.rank = i;
    info.size = 3;
    ws.back()->on_generation(info);
    CHECK(ws.back()->step() == 9);
    CHECK(ws.back()->epoch() == 0);
  }
  for (int step = 0; step < 200; ++step) {
    bool end = false;
    for (auto& w : ws) {
      StepRecords s = w->next();
      end = s.end_of_data;
      if (!end) CHECK(s.epoch == 0);
      for (uint64_t r : s.records) ++count[r];
    }
    if (end) break;
  }
  for (uint64_t r = 0; r < N; ++r) REQUIRE(count[r] == 1);
}

TEST_CASE("shard dispatcher bad input", "[data][shards][bad-input]") {
  auto store = edl::make_memory_store();
  CHECK_THROWS_WITH(ShardGenerator(store, opts(100, 0, 4)), Contains("records_per_shard must be > 0"));
  CHECK_THROWS_WITH(ShardGenerator(store, opts(0, 10, 4)), Contains("empty dataset"));
  CHECK_THROWS_AS(ShardGenerator(store, opts(100, 10, 0)), edl::InvalidArgument);
  CHECK_THROWS_AS(ShardGenerator(nullptr, opts(100, 10, 4)), edl::InvalidArgument);
  ShardGenerator g(store, opts(100, 10, 4));
  CHECK_THROWS_AS(g.load("garbage"), edl::DataError);
  CHECK_THROWS_WITH(g.load(ShardGenerator(edl::make_memory_store(), opts(120, 10, 4)).save()),
                    Contains("records=120") && Contains("this generator has records=100"));
  std::string good = g.save();
  CHECK_THROWS_AS(g.load(good.substr(0, good.size() - 10)), edl::DataError);
  CHECK_THROWS_WITH(g.load(good + "99:5"), Contains("bad shard offset"));
  g.load(good);  // still usable after rejected snapshots
  CHECK(g.next().records.size() == 4);
  // A corrupt claim on the store is reported, not trusted.
  store->set("shards/g0/s0/e0/" + std::to_string(g.shard_order(0)[1]), "not a claim");
  ShardGenerator h(store, opts(100, 10, 4, "h"));
  CHECK_THROWS_WITH(h.next(), Contains("corrupt claim"));
}

TEST_CASE("a claim whose reply was lost is recognised as our own on retry", "[data][shards]") {
  // A store whose first compare_set is applied but then reports a lost connection.
  class LossyStore : public edl::Store {
   public:
    explicit LossyStore(std::shared_ptr<edl::Store> b) : b_(std::move(b)) {}
    void set(const std::string& k, const std::string& v) override { b_->set(k, v); }
    std::optional<std::string> get(const std::string& k) override { return b_->get(k); }
    int64_t add(const std::string& k, int64_t d) override { return b_->add(k, d); }
    bool compare_set(const std::string& k, const std::optional<std::string>& e, const std::string& d,
                     std::optional<std::string>* c) override {
      bool r = b_->compare_set(k, e, d, c);
      if (!lost_) {
        lost_ = true;
        throw edl::StoreError("connection lost (test)");
      }
      return r;
    }
    bool wait(const std::vector<std::string>& k, std::chrono::milliseconds t) override { return b_->wait(k, t); }
    std::optional<std::string> wait_change(const std::string& k, const std::optional<std::string>& v,
                                           std::chrono::milliseconds t) override {
      return b_->wait_change(k, v, t);
    }
    bool del(const std::string& k) override { return b_->del(k); }
    std::vector<std::string> keys(const std::string& p) override { return b_->keys(p); }
    void set_lease(const std::string& k, const std::string& v, std::chrono::milliseconds t) override {
      b_->set_lease(k, v, t);
    }

   private:
    std::shared_ptr<edl::Store> b_;
    bool lost_ = false;
  };
  auto o = opts(100, 10, 5);
  o.epochs = 1;
  ShardGenerator g(std::make_shared<LossyStore>(edl::make_memory_store()), o);
  CHECK_THROWS_AS(g.next(), edl::StoreError);
  std::vector<int> count(100, 0);
  for (int i = 0; i < 100; ++i) {
    StepRecords s = g.next();
    if (s.end_of_data) break;
    for (uint64_t r : s.records) ++count[r];
  }
  for (int c : count) REQUIRE(c == 1);
}

TEST_CASE("the dispatcher rides in State checkpoints: a restarted job resumes the epoch", "[data][shards][checkpoint]") {
  edl::test::TempDir dir;
  const uint64_t N = 150;
  auto o = opts(N, 20, 6);
  o.epochs = 2;
  std::vector<int32_t> count(2 * N, 0);
  {
    ShardGenerator g(edl::make_memory_store(), o);
    edl::elastic::State state;
    state.register_tensor("count", count.data(), count.size(), edl::DataType::kInt32);
    state.register_component("shards", &g);
    state.set_checkpoint_dir(dir.path());
    for (int i = 0; i < 40; ++i) {  // 30 steps per epoch: into epoch 1
      StepRecords s = g.next();
      for (uint64_t r : s.records) ++count[s.epoch * N + r];
      state.step += 1;
      if (i == 34) state.commit();
    }
  }  // the job dies; steps 35..39 are lost with it
  std::fill(count.begin(), count.end(), -100);  // the restarted process starts from garbage
  ShardGenerator g(edl::make_memory_store(), o);
  edl::elastic::State state;
  state.register_tensor("count", count.data(), count.size(), edl::DataType::kInt32);
  state.register_component("shards", &g);
  state.set_checkpoint_dir(dir.path());
  REQUIRE(state.load_checkpoint());
  CHECK(g.step() == 35);
  CHECK(g.epoch() == 1);
  for (int i = 0; i < 100; ++i) {
    StepRecords s = g.next();
    if (s.end_of_data) break;
    for (uint64_t r : s.records) ++count[s.epoch * N + r];
  }
  for (int32_t c : count) REQUIRE(c == 1);
}

TEST_CASE("without edl::init the convenience constructor uses a private store", "[data][shards]") {
  auto o = opts(40, 10, 8);
  o.epochs = 1;
  ShardGenerator g(o);
  std::vector<int> count(40, 0);
  for (StepRecords s = g.next(); !s.end_of_data; s = g.next())
    for (uint64_t r : s.records) ++count[r];
  for (int c : count) CHECK(c == 1);
}

TEST_CASE("the convenience constructor refuses to run before edl::init in a launched process", "[data][shards]") {
  setenv("EDL_STORE", "tcp://127.0.0.1:1", 1);
  CHECK_THROWS_WITH(ShardGenerator(opts(40, 10, 8)), Contains("after edl::init()"));
  unsetenv("EDL_STORE");
}

TEST_CASE("batch_for_size: the local batch follows the world size at each generation, records stay exactly-once",
          "[data][shards]") {
  auto store = edl::make_memory_store();
  auto o = opts(300, 40, 1);
  o.epochs = 1;
  o.batch_for_size = [](int size) { return static_cast<uint64_t>(12 / size); };  // fixed global batch 12
  ShardGenerator g(store, o);
  edl::elastic::GenerationInfo info;
  info.generation = 1;
  info.size = 2;
  g.on_generation(info);
  CHECK(g.batch_size() == 6);
  std::multiset<uint64_t> seen;
  for (int i = 0; i < 3; ++i) {
    auto s = g.next();
    CHECK(s.records.size() == 6);
    seen.insert(s.records.begin(), s.records.end());
  }
  g.save();  // commit at step 3
  info.generation = 2;
  info.size = 4;
  g.on_generation(info);
  CHECK(g.batch_size() == 3);
  for (;;) {
    auto s = g.next();
    if (s.end_of_data) break;
    CHECK(s.records.size() <= 3);
    seen.insert(s.records.begin(), s.records.end());
  }
  CHECK(seen.size() == 300);
  for (uint64_t r = 0; r < 300; ++r) CHECK(seen.count(r) == 1);

  auto bad = opts(300, 40, 1);
  bad.batch_for_size = [](int) { return uint64_t{0}; };
  ShardGenerator b(edl::make_memory_store(), bad);
  CHECK_THROWS_AS(b.on_generation(info), edl::InvalidArgument);
}

TEST_CASE("take_committed: a worker learns which of its batches were committed, never the rolled-back ones",
          "[data][shards]") {
  ShardGenerator g(edl::make_memory_store(), opts(1000, 50, 5));
  CHECK(g.committed_step() == 0);
  std::vector<StepRecords> first;
  for (int i = 0; i < 3; ++i) first.push_back(g.next());
  CHECK(g.take_committed().empty());  // nothing committed yet
  const std::string snap = g.save();  // commit at step 3
  CHECK(g.committed_step() == 3);
  auto c = g.take_committed();
  REQUIRE(c.size() == 3);
  for (size_t i = 0; i < 3; ++i) CHECK(c[i].records == first[i].records);
  CHECK(g.take_committed().empty());  // taken once

  std::vector<StepRecords> lost{g.next(), g.next()};
  g.load(snap);  // failure: roll back to step 3
  CHECK(g.take_committed().empty());  // the two batches after the commit were not committed
  std::vector<StepRecords> again{g.next(), g.next()};
  g.save();
  auto c2 = g.take_committed();
  REQUIRE(c2.size() == 2);
  CHECK(c2[0].step == 3);
  CHECK(c2[0].records == again[0].records);
  CHECK(c2[1].records == again[1].records);
}
