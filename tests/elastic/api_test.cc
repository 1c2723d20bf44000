// The process-wide API: edl::elastic::run / edl::notify_batch_end in a static world of one and in
// an elastic job of one process (EDL_ELASTIC=1 without a launcher: an in-process store).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <vector>

#include "edl/edl.h"
#include "edl/elastic.h"

TEST_CASE("notify_batch_end outside run is an InvalidArgument", "[api]") {
  CHECK_THROWS_WITH(edl::notify_batch_end(), Catch::Contains("inside edl::elastic::run"));
}

TEST_CASE("static world of one: run calls fn once, notify_batch_end steps and commits", "[api]") {
  edl::init();
  std::vector<float> w(8, 1.0f);
  edl::elastic::State state;
  state.register_tensor("w", w.data(), w.size(), edl::DataType::kFloat32);
  int calls = 0;
  edl::elastic::run(state, [&] {
    ++calls;
    while (state.step < 5) {
      w[0] += 1.0f;
      edl::notify_batch_end();
    }
  });
  CHECK(calls == 1);
  CHECK(state.step == 5);
  CHECK(state.committed_step() == 5);
  w[0] = -1.0f;
  state.restore();
  CHECK(w[0] == 6.0f);
  edl::shutdown();
}

TEST_CASE("elastic job of one process without a launcher", "[api]") {
  ::setenv("EDL_ELASTIC", "1", 1);
  ::setenv("EDL_START_WINDOW_MS", "0", 1);
  ::setenv("EDL_WORKER_ID", "solo", 1);
  edl::init();
  CHECK(edl::size() == 1);
  CHECK(edl::rank() == 0);
  std::vector<float> w(8, 0.0f);
  edl::elastic::State state;
  state.register_tensor("w", w.data(), w.size(), edl::DataType::kFloat32);
  int generations = 0;
  state.on_generation([&](const edl::elastic::GenerationInfo& g) {
    ++generations;
    CHECK(g.size == 1);
  });
  edl::elastic::run(state, [&] {
    while (state.step < 10) {
      edl::allreduce(w.data(), w.size(), edl::DataType::kFloat32, edl::ReduceOp::kSum, "w");
      w[1] += 1.0f;
      edl::notify_batch_end();
    }
  });
  CHECK(state.step == 10);
  CHECK(w[1] == 10.0f);
  CHECK(generations == 1);
  edl::shutdown();
  ::unsetenv("EDL_ELASTIC");
  ::unsetenv("EDL_START_WINDOW_MS");
  ::unsetenv("EDL_WORKER_ID");
}
