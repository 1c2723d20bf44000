// The engine's timeline events (docs/observability.md, "Timeline"): ranks as threads write one
// file; every request has its negotiation, queue wait and collective with its name, bytes and the
// id of the fused collective it travelled in, and fused tensors share that id.
#include <catch2/catch.hpp>
#include <cstdio>
#include <map>
#include <set>

#include "collective/engine.h"
#include "common/timeline.h"
#include "common/timeline_file.h"
#include "harness.h"

using namespace edl;
using edl::collective::Engine;
using edl::collective::EngineOptions;
using edl::test::events_named;
using edl::test::read_timeline;
using edl::test::run_engines;

TEST_CASE("timeline: engine records negotiation, queue and fused allreduce per tensor", "[timeline][engine]") {
  const int n = 3, kTensors = 8, kRounds = 2;
  const std::string path = edl::test::temp_path("engine");
  timeline::Options o;
  o.path = path;
  timeline::start(o);
  EngineOptions eo;
  eo.cycle_time = std::chrono::milliseconds(20);
  run_engines(n, eo, [&](int rank, Engine& engine) {
    std::vector<std::vector<float>> t(kTensors);
    for (int i = 0; i < kTensors; ++i) t[i].assign(static_cast<size_t>(10 * (i + 1)), 1.0f);
    for (int round = 0; round < kRounds; ++round) {
      std::vector<Handle> h;
      for (int i = 0; i < kTensors; ++i)
        h.push_back(engine.allreduce(t[i].data(), t[i].size(), DataType::kFloat32, ReduceOp::kSum,
                                     "grad." + std::to_string(i)));
      float b = static_cast<float>(rank);
      h.push_back(engine.broadcast(&b, 1, DataType::kFloat32, 0, "bcast"));
      for (auto& x : h) x.wait();
    }
  });
  timeline::stop();
  auto all = read_timeline(path);

  auto ar = events_named(all, "allreduce");
  std::map<std::string, int> per_tensor;
  std::map<int64_t, std::set<std::string>> fused;  // fused id -> tensors
  for (const auto& e : ar) {
    if (!e["args"].contains("name")) continue;  // the "collectives" lane: one event per collective
    const std::string name = e["args"]["name"];
    ++per_tensor[name];
    const int i = std::stoi(name.substr(5));
    CHECK(e["args"]["bytes"] == 40 * (i + 1));
    CHECK(e["args"]["fused_id"].get<int64_t>() > 0);
    CHECK(e["dur"].get<int64_t>() >= 0);
    fused[e["args"]["fused_id"].get<int64_t>()].insert(name);
    CHECK(static_cast<size_t>(e["args"]["fused_tensors"].get<int64_t>()) >= 1);
  }
  REQUIRE(per_tensor.size() == kTensors);
  for (const auto& [name, count] : per_tensor) {
    INFO(name);
    CHECK(count == n * kRounds);
  }
  // Fusion happened (the engine test shows tensors enqueued in a burst fuse), and the tensors of one
  // fused collective share its id and report its size.
  bool some_fused = false;
  for (const auto& [id, names] : fused) some_fused = some_fused || names.size() >= 2;
  CHECK(some_fused);
  for (const auto& e : ar)
    if (e["args"].contains("name")) CHECK(fused[e["args"]["fused_id"].get<int64_t>()].size() ==
                                           static_cast<size_t>(e["args"]["fused_tensors"].get<int64_t>()));

  // Negotiation and queue wait for every request, on the tensor's lane, in order.
  auto neg = events_named(all, "negotiate");
  auto queue = events_named(all, "queue");
  size_t tensor_neg = 0;
  for (const auto& e : neg) tensor_neg += e["args"].contains("name");
  CHECK(tensor_neg == static_cast<size_t>(n * kRounds * (kTensors + 1)));
  CHECK(queue.size() == static_cast<size_t>(n * kRounds * (kTensors + 1)));
  auto bc = events_named(all, "broadcast");
  CHECK(bc.size() == static_cast<size_t>(2 * n * kRounds));  // tensor lane + collectives lane
  for (const auto& q : queue) {
    CHECK(q["dur"].get<int64_t>() >= 0);
    CHECK(q["ph"] == "X");
  }
  std::remove(path.c_str());
}
