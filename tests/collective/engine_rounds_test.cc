// When the engine runs its rounds and on which thread: an idle event-driven engine runs none (a
// ticking one runs one per cycle), a thread waiting on a handle runs the rounds itself while the
// engine thread is idle, a waiting thread still sees requests that other threads submit, and
// stop() releases a thread that is waiting inside the engine.
#include <catch2/catch.hpp>
#include <thread>

#include "collective/engine.h"
#include "edl/edl.h"
#include "harness.h"

using namespace edl;
using edl::collective::Engine;
using edl::collective::EngineOptions;
using edl::test::run_engines;

TEST_CASE("engine: an idle event-driven engine runs no rounds; a ticking one runs one per cycle",
          "[collective][engine]") {
  for (bool tick : {false, true}) {
    INFO((tick ? "ticking" : "event-driven"));
    EngineOptions eo;
    eo.cycle_time = std::chrono::milliseconds(1);
    eo.tick = tick;
    std::vector<uint64_t> idle_rounds(2);
    run_engines(2, eo, [&](int rank, Engine& engine) {
      double x = rank;
      engine.allreduce(&x, 1, DataType::kFloat64, ReduceOp::kSum, "x", true).wait();
      const uint64_t before = engine.stats().cycles;
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // both ranks idle
      idle_rounds[rank] = engine.stats().cycles - before;
      engine.allreduce(&x, 1, DataType::kFloat64, ReduceOp::kSum, "x", true).wait();
      TREQUIRE(x == 2);
    });
    for (int r = 0; r < 2; ++r) {
      INFO("rank " << r << ": " << idle_rounds[r] << " rounds in 300 ms of idleness");
      if (tick) CHECK(idle_rounds[r] >= 30);  // ~300 at 1 ms; allow a slow, loaded machine
      else CHECK(idle_rounds[r] <= 1);        // at most the idle_round fallback (1 s)
    }
  }
}

TEST_CASE("engine: a thread waiting on a handle runs the round itself while the engine thread is idle",
          "[collective][engine]") {
  for (bool tick : {false, true}) {
    INFO((tick ? "ticking" : "event-driven"));
    EngineOptions eo;
    eo.tick = tick;
    std::vector<collective::EngineStats> stats(2);
    run_engines(2, eo, [&](int rank, Engine& engine) {
      for (int i = 0; i < 20; ++i) {
        float v[3] = {1.0f * rank, 2.0f, 3.0f};
        engine.allreduce(v, 3, DataType::kFloat32, ReduceOp::kSum, "v", true).wait();  // blocking call
        TREQUIRE(v[0] == 1 && v[1] == 4 && v[2] == 6);
        std::vector<float> big(1000, 1.0f);
        Handle h = engine.allreduce(big.data(), big.size(), DataType::kFloat32, ReduceOp::kSum, "big");
        h.wait();  // asynchronous call, then wait
        TREQUIRE(big[0] == 2 && big[999] == 2);
      }
      stats[rank] = engine.stats();
    });
    for (int r = 0; r < 2; ++r) {
      INFO("rank " << r << ": helped_rounds " << stats[r].helped_rounds << " of " << stats[r].cycles);
      if (tick) {
        CHECK(stats[r].helped_rounds == 0);  // a ticking engine keeps the rounds on its own thread
      } else {
        // Blocking calls do not wake the engine thread: their rounds run on the caller.
        CHECK(stats[r].helped_rounds >= 10);
      }
    }
  }
}

TEST_CASE("engine: a waiting thread still sees requests other threads submit", "[collective][engine]") {
  // Rank 0's main thread waits on "a" (and may hold the round role while it waits for rank 1),
  // but rank 1 first needs "b", which a second thread of rank 0 submits 100 ms later. A wait that
  // missed that request would stall until idle_round (60 s here).
  for (bool tick : {false, true}) {
    INFO((tick ? "ticking" : "event-driven"));
    EngineOptions eo;
    eo.tick = tick;
    eo.cycle_time = std::chrono::milliseconds(tick ? 1 : 1000);
    eo.idle_round = std::chrono::seconds(60);
    const auto t0 = std::chrono::steady_clock::now();
    run_engines(2, eo, [&](int rank, Engine& engine) {
      double a = rank + 1, b = 10 * (rank + 1);
      if (rank == 0) {
        std::thread other([&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          engine.allreduce(&b, 1, DataType::kFloat64, ReduceOp::kSum, "b").wait();
        });
        // Blocking: the engine thread is not woken, so this thread takes the round role.
        engine.allreduce(&a, 1, DataType::kFloat64, ReduceOp::kSum, "a", true).wait();
        other.join();
      } else {
        engine.allreduce(&b, 1, DataType::kFloat64, ReduceOp::kSum, "b", true).wait();
        engine.allreduce(&a, 1, DataType::kFloat64, ReduceOp::kSum, "a", true).wait();
      }
      TREQUIRE(a == 3);
      TREQUIRE(b == 30);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    INFO("took " << s << " s; a missed wake-up costs 60 s");
    CHECK(s < 30);
  }
}

TEST_CASE("engine: stop() releases a thread waiting inside the engine with AbortedError", "[collective][engine]") {
  run_engines(2, EngineOptions{}, [&](int rank, Engine& engine) {
    double x = 1;
    if (rank == 0) {
      Handle h = engine.allreduce(&x, 1, DataType::kFloat64, ReduceOp::kSum, "never");  // rank 1 never submits it
      std::exception_ptr err;
      std::thread waiter([&] {
        try {
          h.wait();  // helps: waits for rank 1 inside the engine
        } catch (...) {
          err = std::current_exception();
        }
      });
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      engine.stop();
      waiter.join();
      TREQUIRE(err != nullptr);
      try {
        std::rethrow_exception(err);
      } catch (const AbortedError&) {
      } catch (const std::exception& e) {
        TFAIL("expected AbortedError, got: " << e.what());
      }
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      engine.stop();  // rank 0's stop aborts its communicator: rank 1 sees it at the latest here
    }
  });
}
