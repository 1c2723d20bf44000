// ShardLoader: prefetched batches always carry exactly the records the dispatcher assigned, also
// across a rollback that changes the plan.
#include <catch2/catch.hpp>

#include "edl/data.h"
#include "edl/error.h"

using namespace edl::data;

TEST_CASE("ShardLoader delivers the dispatcher's records, assembled, across a rollback", "[data][loader]") {
  SyntheticOptions so;
  so.records = 300;
  so.shape = {3, 8, 8};
  auto ds = make_synthetic(so);
  auto store = edl::make_memory_store();
  ShardOptions o;
  o.records = 300;
  o.records_per_shard = 40;
  o.batch_size = 6;
  o.epochs = 2;
  o.worker_id = "a";
  ShardGenerator a(store, o);
  o.worker_id = "b";
  o.batch_size = 5;
  ShardGenerator b(store, o);
  BatchOptions bo = cifar10_normalization(true);
  ShardLoader la(ds, a, bo, 3), lb(ds, b, bo, 3);
  Batch ba, bb, want;
  std::string snap_a, snap_b;
  std::vector<int> count(600, 0), committed_count;
  bool rolled_back = false;
  for (int step = 0; step < 1000; ++step) {
    StepRecords sa = la.next(&ba), sb = lb.next(&bb);
    REQUIRE(sa.end_of_data == sb.end_of_data);
    if (sa.end_of_data) break;
    for (auto [s, batch] : {std::pair<StepRecords*, Batch*>{&sa, &ba}, {&sb, &bb}}) {
      REQUIRE(batch->size == s->records.size());
      assemble_batch(*ds, s->records.data(), s->records.size(), bo, s->epoch, &want);
      REQUIRE(batch->indices == want.indices);
      REQUIRE(batch->images == want.images);
      REQUIRE(batch->labels == want.labels);
      for (uint64_t r : s->records) ++count[s->epoch * 300 + r];
    }
    if (step == 20) {
      snap_a = a.save();
      snap_b = b.save();
      committed_count = count;
    }
    if (step == 27 && !rolled_back) {  // a failure: both roll back to step 21 in a new generation
      rolled_back = true;
      a.load(snap_a);
      b.load(snap_b);
      edl::elastic::GenerationInfo info;
      info.generation = 1;
      info.size = 2;
      info.rank = 1;  // b now claims first
      b.on_generation(info);
      info.rank = 0;
      a.on_generation(info);
      count = committed_count;
    }
  }
  CHECK(rolled_back);
  CHECK(la.dropped() + lb.dropped() > 0);
  for (int c : count) REQUIRE(c == 1);
}
