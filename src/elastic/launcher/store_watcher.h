// StoreWatcher: edl-run's view of the elastic protocol. A background thread watches the keys the
// worker-side runtime writes (src/elastic/keys.h, docs/elastic.md): <job>/gen and
// <job>/g<G>/members for generations, <job>/lease/* for the live worker count, <job>/finished, and
// a "!job-error" decision. It blocks in wait_change() on <job>/gen (at most 500 ms at a time) —
// no busy polling.
// Thread-safety: take_events()/live_workers()/finished()/job_error() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "edl/store.h"

namespace edl::launcher {

struct GenerationEvent {
  uint64_t gen = 0;
  std::vector<std::string> members;  // worker ids in rank order
  std::chrono::steady_clock::time_point seen;
};

class StoreWatcher {
 public:
  StoreWatcher(std::shared_ptr<Store> store, const std::string& job_id);
  ~StoreWatcher();

  std::vector<GenerationEvent> take_events();
  int live_workers() const { return live_.load(); }  // -1 until the first count
  bool finished() const { return finished_.load(); }
  std::string job_error() const;

 private:
  void loop();

  std::shared_ptr<Store> store_;
  std::string job_;
  std::atomic<bool> stop_{false};
  std::atomic<int> live_{-1};
  std::atomic<bool> finished_{false};
  mutable std::mutex mu_;
  std::vector<GenerationEvent> events_;
  std::string job_error_;
  std::thread thread_;
};

}  // namespace edl::launcher
