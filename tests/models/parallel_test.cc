#include "models/common/parallel.h"

#include <atomic>
#include <stdexcept>
#include <vector>

#include <catch2/catch.hpp>

namespace edl::models {
namespace {

TEST_CASE("run_chunks covers every index once with distinct thread ids", "[models][parallel]") {
  for (int threads : {1, 2, 3, 4, 2, 1}) {  // the pool grows, then smaller regions reuse it
    for (int n : {1, 2, 5, 64}) {
      std::vector<std::atomic<int>> hits(n);
      std::vector<std::atomic<int>> tids(threads);
      run_chunks(threads, n, [&](int tid, int b, int e) {
        REQUIRE(tid >= 0);
        REQUIRE(tid < threads);
        tids[tid]++;
        for (int i = b; i < e; ++i) hits[i]++;
      });
      for (int i = 0; i < n; ++i) CHECK(hits[i] == 1);
      for (int t = 0; t < threads; ++t) CHECK(tids[t] <= 1);
    }
  }
}

TEST_CASE("run_chunks rethrows a chunk's exception to the caller", "[models][parallel]") {
  CHECK_THROWS_AS(run_chunks(2, 8, [](int tid, int, int) {
                    if (tid == 1) throw std::runtime_error("chunk failed");
                  }),
                  std::runtime_error);
  // The pool still works afterwards.
  std::atomic<int> sum{0};
  run_chunks(2, 8, [&](int, int b, int e) { sum += e - b; });
  CHECK(sum == 8);
}

}  // namespace
}  // namespace edl::models
