// The process-wide API: edl::elastic::run / edl::notify_batch_end in a static world of one and in
// an elastic job of one process (EDL_ELASTIC=1 without a launcher: an in-process store).
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "edl/edl.h"
#include "edl/elastic.h"
#include "edl/store.h"
#include "edl/store_server.h"
#include "elastic/worker_metrics.h"

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

namespace {

// An elastic job of this process alone: without `store_url` (no launcher) on an in-process store,
// else on that store (EDL_STORE, secret "solo-secret").
struct SoloJob {
  explicit SoloJob(const char* job, const std::string& store_url = "") {
    if (!store_url.empty()) {
      ::setenv("EDL_STORE", store_url.c_str(), 1);
      ::setenv("EDL_JOB_SECRET", "solo-secret", 1);
    }
    ::setenv("EDL_ELASTIC", "1", 1);
    ::setenv("EDL_START_WINDOW_MS", "0", 1);
    ::setenv("EDL_WORKER_ID", "solo", 1);
    ::setenv("EDL_JOB_ID", job, 1);
    ::setenv("EDL_HEARTBEAT_MS", "50", 1);
    edl::init();
  }
  ~SoloJob() {
    edl::shutdown();
    for (const char* v : {"EDL_ELASTIC", "EDL_START_WINDOW_MS", "EDL_WORKER_ID", "EDL_JOB_ID", "EDL_HEARTBEAT_MS",
                          "EDL_STORE", "EDL_JOB_SECRET"})
      ::unsetenv(v);
  }
};

}  // namespace

// Issue 22, item 3: a program tells "training finished" from "this worker left" by run()'s outcome,
// and a worker that left is no longer anybody's rank 0.
TEST_CASE("run's outcome: finished keeps the last generation, a leave makes rank -1 and size 0", "[api][outcome]") {
  CHECK(std::string(edl::elastic::outcome_name(edl::elastic::RunOutcome::kFinished)) == "finished");
  CHECK(std::string(edl::elastic::outcome_name(edl::elastic::RunOutcome::kLeft)) == "left");
  std::vector<float> w(4, 1.0f);
  SECTION("finished") {
    SoloJob job("outcome_finished");
    edl::elastic::State state;
    state.register_tensor("w", w.data(), w.size(), edl::DataType::kFloat32);
    auto outcome = edl::elastic::run(state, [&] {
      while (state.step < 5) edl::notify_batch_end();
    });
    CHECK(outcome == edl::elastic::RunOutcome::kFinished);
    CHECK(edl::rank() == 0);
    CHECK(edl::size() == 1);
    edl::allreduce(w.data(), w.size(), edl::DataType::kFloat32, edl::ReduceOp::kSum, "after");  // still a member
    CHECK(w[0] == 1.0f);
  }
  SECTION("left") {
    SoloJob job("outcome_left");
    edl::elastic::State state;
    state.register_tensor("w", w.data(), w.size(), edl::DataType::kFloat32);
    auto outcome = edl::elastic::run(state, [&] {
      while (state.step < 1000) {
        if (state.step == 3) edl::elastic::request_leave();
        edl::notify_batch_end();
      }
    });
    CHECK(outcome == edl::elastic::RunOutcome::kLeft);
    CHECK(state.step < 1000);            // it stopped where it left, not at the end of training
    CHECK(state.committed_step() == state.step);
    CHECK(edl::rank() == -1);
    CHECK(edl::size() == 0);
    CHECK(edl::local_rank() == -1);
    CHECK(edl::local_size() == 0);
    CHECK_THROWS_AS(edl::allreduce(w.data(), w.size(), edl::DataType::kFloat32), edl::InvalidArgument);
    CHECK_THROWS_WITH(edl::barrier(), Catch::Contains("no longer a member of the job"));
  }
}

// Issue 22, item 6: one setter for the samples per batch feeds edl-run's metrics and the throughput
// record of the autoscaling advice; the old elastic setter forwards to it.
TEST_CASE("set_samples_per_batch feeds the metrics and the throughput record", "[api][samples]") {
  CHECK_THROWS_AS(edl::set_samples_per_batch(-1), edl::InvalidArgument);
  auto& metrics = edl::metrics::WorkerMetrics::instance();
  std::vector<float> w(4, 0.0f);
  edl::StoreServerOptions so;
  so.secret = "solo-secret";
  edl::StoreServer server(so);
  {
    SoloJob job("samples_job", server.url());
    edl::set_samples_per_batch(8);
    edl::elastic::State state;
    state.register_tensor("w", w.data(), w.size(), edl::DataType::kFloat32);
    const uint64_t before = metrics.snapshot().samples;
    const auto t0 = std::chrono::steady_clock::now();
    edl::elastic::run(state, [&] {  // rank 0 publishes at most every 250 ms, written after a heartbeat
      while (state.step < 10 || std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(700)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        edl::notify_batch_end();
      }
    });
    CHECK(metrics.snapshot().samples - before == 8 * static_cast<uint64_t>(state.step));
    edl::StoreOptions co;
    co.secret = "solo-secret";
    auto store = edl::connect_store(server.url(), co);
    std::optional<std::string> record;
    for (int i = 0; i < 100 && !record; ++i) {  // the lease thread writes it after its next heartbeat
      record = store->get("samples_job/throughput");
      if (!record) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    REQUIRE(record.has_value());
    CHECK(record->substr(record->rfind(' ') + 1) == "8");  // "<G> <size> <steps> <seconds> <local batch>"
  }
  {
    SoloJob job("samples_job_old_setter");
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    edl::elastic::set_local_batch_size(3);  // deprecated: sets the same number
#pragma GCC diagnostic pop
    edl::elastic::State state;
    state.register_tensor("w", w.data(), w.size(), edl::DataType::kFloat32);
    const uint64_t before = metrics.snapshot().samples;
    edl::elastic::run(state, [&] {
      while (state.step < 4) edl::notify_batch_end();
    });
    CHECK(metrics.snapshot().samples - before == 3 * 4);
  }
  edl::set_samples_per_batch(0);  // back to "not known": a batch counts as one sample
  const uint64_t before = metrics.snapshot().samples;
  metrics.batch_end(1);
  CHECK(metrics.snapshot().samples - before == 1);
}
