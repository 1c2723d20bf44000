// The optimizer's timeline events (docs/observability.md, "Timeline"): per step "backward" (first
// to last gradient), "step" with "wait" and "update" inside it, and per bucket its queue wait and
// allreduce (name, bytes, collective id), for two thread-ranks with their own communicators.
#include <catch2/catch.hpp>
#include <cstdio>
#include <map>
#include <thread>

#include "common/timeline.h"
#include "common/timeline_file.h"
#include "edl/optim.h"
#include "rank_threads.h"
#include "tiny_mlp.h"

using namespace edl;
using edl::test::events_named;
using edl::test::read_timeline;

TEST_CASE("timeline: optimizer backward and step phases, bucket queue and allreduce", "[timeline]") {
  const int kRanks = 2, kSteps = 3;
  const std::string path = edl::test::temp_path("optim");
  timeline::Options to;
  to.path = path;
  timeline::start(to);
  auto data = test::make_dataset(64, 5);
  test::run_rank_threads(kRanks, "tl_optim/", std::chrono::milliseconds(20000), [&](int r, std::shared_ptr<Communicator> comm) {
    DistributedOptimizerOptions o;
    o.comm = comm;
    o.bucket_cap_bytes = 64;  // several buckets
    DistributedOptimizer opt(o);
    test::TinyMlp m(5, 8);
    for (auto& p : m.parameters()) opt.add_parameter("p", p.data, p.grad, p.count);
    for (int s = 0; s < kSteps; ++s) {
      m.backward(data, static_cast<size_t>(s) * 8 + r * 4, 4, [&](size_t i) { opt.grad_ready(i); });
      opt.step();
    }
  });
  timeline::stop();
  auto all = read_timeline(path);

  for (const char* phase : {"backward", "step", "wait", "update"}) {
    INFO(phase);
    auto ev = events_named(all, phase);
    CHECK(ev.size() == static_cast<size_t>(kRanks * kSteps));
    std::map<int64_t, int> per_step;
    for (const auto& e : ev) ++per_step[e["args"]["step"].get<int64_t>()];
    CHECK(per_step.size() == static_cast<size_t>(kSteps));
  }
  // "wait" and "update" lie inside their "step" (same lane: Chrome nests them).
  auto steps = events_named(all, "step");
  for (const auto& w : events_named(all, "update")) {
    bool inside = false;
    for (const auto& s : steps)
      inside = inside || (s["args"]["step"] == w["args"]["step"] && s["ts"] <= w["ts"] &&
                          w["ts"].get<int64_t>() + w["dur"].get<int64_t>() <= s["ts"].get<int64_t>() + s["dur"].get<int64_t>());
    CHECK(inside);
  }
  const int64_t buckets = steps.at(0)["args"]["buckets"];
  CHECK(buckets >= 2);
  auto ar = events_named(all, "allreduce");
  CHECK(ar.size() == static_cast<size_t>(kRanks * kSteps * buckets));
  for (const auto& e : ar) {
    CHECK(e["args"]["name"].get<std::string>().rfind("edl.optim.", 0) == 0);
    CHECK(e["args"]["bytes"].get<int64_t>() > 0);
    CHECK(e["args"]["fused_id"].get<int64_t>() > 0);
  }
  CHECK(events_named(all, "queue").size() == ar.size());
  std::remove(path.c_str());
}
