// Test helper of the optimizer suite: ranks as threads, each with its own Communicator over one
// memory store, the way equivalence_test.cc and timeline_test.cc run a distributed optimizer.
// Thread-safety: fn runs on n threads at once (one per rank); no Catch2 assertion inside it.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "edl/communicator.h"
#include "edl/store.h"

namespace edl::test {

// Runs fn(rank, communicator) on n threads; the communicators (store prefix `prefix`) have
// `timeout` as collective and connect deadline. Rethrows the first rank's exception once every
// thread has ended.
inline void run_rank_threads(int n, const std::string& prefix, std::chrono::milliseconds timeout,
                             const std::function<void(int, std::shared_ptr<Communicator>)>& fn) {
  auto store = make_memory_store();
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        CommunicatorOptions co;
        co.timeout = timeout;
        co.connect_timeout = timeout;
        fn(r, Communicator::create(store, prefix, r, n, co));
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace edl::test
