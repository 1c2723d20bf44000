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

TEST_CASE("engine: an idle event-driven engine runs no rounds, a ticking one runs one per cycle",
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
  // Rank 1 comes 3 ms late to every blocking call, so rank 0's engine thread is asleep (a blocking
  // call does not ring it, no peer has started a round) when rank 0's caller waits: the caller must
  // run that round. (Which thread runs rank 1's rounds is a race: its engine thread is woken by rank
  // 0's round and joins it.)
  for (bool tick : {false, true}) {
    INFO((tick ? "ticking" : "event-driven"));
    EngineOptions eo;
    eo.tick = tick;
    std::vector<uint64_t> helped(2), rounds(2);
    run_engines(2, eo, [&](int rank, Engine& engine) {
      const auto before = engine.stats();
      for (int i = 0; i < 20; ++i) {
        if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(3));
        float v[3] = {1.0f * rank, 2.0f, 3.0f};
        engine.allreduce(v, 3, DataType::kFloat32, ReduceOp::kSum, "v", true).wait();  // blocking call
        TREQUIRE(v[0] == 1 && v[1] == 4 && v[2] == 6);
      }
      const auto after = engine.stats();
      helped[rank] = after.helped_rounds - before.helped_rounds;
      rounds[rank] = after.cycles - before.cycles;
      for (int i = 0; i < 20; ++i) {  // asynchronous call, then wait: results only
        std::vector<float> big(1000, 1.0f);
        Handle h = engine.allreduce(big.data(), big.size(), DataType::kFloat32, ReduceOp::kSum, "big");
        h.wait();
        TREQUIRE(big[0] == 2 && big[999] == 2);
      }
      if (tick) TREQUIRE(engine.stats().helped_rounds == 0);  // a ticking engine keeps the rounds on its thread
    });
    INFO("rank 0: helped_rounds " << helped[0] << " of " << rounds[0] << " in the blocking calls");
    if (!tick) CHECK(helped[0] >= 10);  // 20 expected; a round may still land on a woken engine thread
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

TEST_CASE("engine: a request another rank never submits fails Handle::wait() with TimeoutError at the deadline",
          "[collective][engine]") {
  for (bool tick : {false, true}) {
    INFO((tick ? "ticking" : "event-driven"));
    EngineOptions eo;
    eo.tick = tick;
    eo.idle_round = std::chrono::milliseconds(50);
    eo.request_timeout = std::chrono::milliseconds(300);
    std::vector<std::string> errors(2);
    std::vector<int> timed_out(2, 0);
    run_engines(2, eo, [&](int rank, Engine& engine) {
      double x = 1;
      engine.allreduce(&x, 1, DataType::kFloat64, ReduceOp::kSum, "both", true).wait();  // the mesh works
      if (rank == 1) {  // "stuck": submits nothing more; its engine still takes part in the rounds
        std::this_thread::sleep_for(std::chrono::milliseconds(1500));
        return;
      }
      Handle h = engine.allreduce(&x, 1, DataType::kFloat64, ReduceOp::kSum, "only-rank-0");
      try {
        h.wait();
      } catch (const TimeoutError& e) {
        timed_out[rank] = 1;
        errors[rank] = e.what();
      } catch (const std::exception& e) {
        errors[rank] = std::string("other error: ") + e.what();
      }
    });
    INFO(errors[0]);
    CHECK(timed_out[0] == 1);
    CHECK(errors[0].find("'only-rank-0'") != std::string::npos);
    CHECK(errors[0].find("1 of 2 ranks never submitted it") != std::string::npos);
  }
}
