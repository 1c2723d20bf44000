// The agreement that builds a generation's device side (src/cuda/generation_plan.h) and the NCCL
// version gate (src/cuda/nccl_version.h): host logic, tested without a GPU.
#include <catch2/catch.hpp>

#include "cuda/generation_plan.h"
#include "cuda/nccl_version.h"
#include "edl/error.h"

using namespace edl;
using namespace edl::cuda;

namespace {

// Survivors of generation g-1 (of `parent_size` ranks) that had the given parent ranks.
std::vector<RankRecord> survivors(std::vector<int> parent_ranks, int parent_size, uint64_t g) {
  std::vector<RankRecord> rs;
  for (int pr : parent_ranks) {
    RankRecord r;
    r.device_ok = true;
    r.can_shrink = true;
    r.parent_usable = true;
    r.parent_generation = g - 1;
    r.parent_rank = pr;
    r.parent_size = parent_size;
    rs.push_back(r);
  }
  return rs;
}

}  // namespace

TEST_CASE("plan: members lost only -> shrink, excluding exactly the missing ranks", "[cuda][plan]") {
  auto p = decide_plan(survivors({0, 2}, 3, 5), 5);
  CHECK(p.mode == PlanMode::kShrink);
  CHECK(p.exclude == std::vector<int>{1});
  p = decide_plan(survivors({1, 3, 4}, 6, 9), 9);
  CHECK(p.mode == PlanMode::kShrink);
  CHECK(p.exclude == std::vector<int>{0, 2, 5});
}

TEST_CASE("plan: every reason to build a fresh communicator instead", "[cuda][plan]") {
  auto base = survivors({0, 2}, 3, 5);
  auto expect_init = [](std::vector<RankRecord> rs, uint64_t g, const std::string& part) {
    const auto p = decide_plan(rs, g);
    INFO(p.reason);
    CHECK(p.mode == PlanMode::kInit);
    CHECK(p.reason.find(part) != std::string::npos);
  };
  auto rs = base;
  rs.push_back(RankRecord{});  // a joiner: no parent communicator
  rs.back().device_ok = true;
  rs.back().can_shrink = true;
  expect_init(rs, 5, "new to the job");
  rs = base;
  rs[1].can_shrink = false;  // EDL_NCCL_SHRINK=0 or an old NCCL on one rank
  expect_init(rs, 5, "cannot shrink");
  rs = base;
  rs[0].parent_usable = false;  // its communicator was aborted
  expect_init(rs, 5, "aborted");
  expect_init(base, 7, "generation 4, not 6");  // the last communicator is not of the previous generation
  expect_init(survivors({2, 0}, 3, 5), 5, "order");  // survivors must keep their relative order
  expect_init(survivors({0, 1, 2}, 3, 5), 5, "no member was lost");
  rs = base;
  rs[1].parent_size = 4;
  expect_init(rs, 5, "size");
}

TEST_CASE("plan: disabled when a rank has no device or the transports differ, host and local modes",
          "[cuda][plan]") {
  auto rs = survivors({0, 1}, 2, 2);
  rs[1].device_ok = false;
  rs[1].why = "CUDA driver version is insufficient for CUDA runtime version";
  auto p = decide_plan(rs, 3);
  CHECK(p.mode == PlanMode::kDisabled);
  CHECK(p.reason == "rank 1 has no usable CUDA device: CUDA driver version is insufficient for CUDA runtime version");
  rs = survivors({0, 1}, 2, 2);
  rs[0].transport = Transport::kHost;
  p = decide_plan(rs, 3);
  CHECK(p.mode == PlanMode::kDisabled);
  CHECK(p.reason.find("EDL_GPU_TRANSPORT differs") != std::string::npos);
  rs[1].transport = Transport::kHost;
  CHECK(decide_plan(rs, 3).mode == PlanMode::kHost);
  CHECK(decide_plan({rs[0]}, 3).mode == PlanMode::kLocal);
  CHECK_THROWS_AS(decide_plan({}, 1), InvalidArgument);
}

TEST_CASE("plan records: encode / decode round trip, corrupt bytes are a CommError naming the rank",
          "[cuda][plan]") {
  RankRecord r;
  r.device_ok = true;
  r.why = "because";
  r.transport = Transport::kHost;
  r.can_shrink = true;
  r.parent_usable = true;
  r.parent_generation = 41;
  r.parent_rank = 3;
  r.parent_size = 7;
  const std::string b = encode_record(r);
  const RankRecord d = decode_record(b.data(), b.size(), 2);
  CHECK(d.device_ok);
  CHECK(d.why == "because");
  CHECK(d.transport == Transport::kHost);
  CHECK(d.can_shrink);
  CHECK(d.parent_usable);
  CHECK(d.parent_generation == 41);
  CHECK(d.parent_rank == 3);
  CHECK(d.parent_size == 7);
  for (size_t cut = 0; cut < b.size(); ++cut) CHECK_THROWS_AS(decode_record(b.data(), cut, 2), CommError);
  std::string bad = b;
  bad[0] ^= 1;
  CHECK_THROWS_WITH(decode_record(bad.data(), bad.size(), 2), Catch::Contains("rank 2"));
  bad = b;
  bad[5] = 9;  // unknown transport
  CHECK_THROWS_AS(decode_record(bad.data(), bad.size(), 2), CommError);
  CHECK_THROWS_AS(decode_record((b + "x").data(), b.size() + 1, 2), CommError);  // trailing bytes
}

TEST_CASE("NCCL version gate: Shrink from 2.27.3, Revoke from 2.28.7, a warning for 2.28.3 - 2.28.8",
          "[cuda][nccl]") {
  auto v = nccl_version(22809);
  CHECK(v.text() == "2.28.9");
  CHECK(v.shrink);
  CHECK(v.revoke);
  CHECK_FALSE(v.caution);
  v = nccl_version(22807);
  CHECK(v.revoke);
  CHECK(v.caution);
  v = nccl_version(22806);
  CHECK(v.shrink);
  CHECK_FALSE(v.revoke);
  v = nccl_version(22703);
  CHECK(v.shrink);
  CHECK_FALSE(v.revoke);
  v = nccl_version(22702);
  CHECK_FALSE(v.shrink);
  v = nccl_version(2804);  // the old encoding of 2.8.4
  CHECK(v.text() == "2.8.4");
  CHECK_FALSE(v.shrink);
  v = nccl_version(22902);
  CHECK(v.text() == "2.29.2");
  CHECK(v.revoke);
  CHECK(nccl_version(30001).revoke);
}
