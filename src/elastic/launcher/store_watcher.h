// StoreWatcher: edl-run's view of the elastic protocol. A background thread watches the keys the
// worker-side runtime writes (src/elastic/keys.h, docs/elastic.md): <job>/gen and
// <job>/g<G>/members for generations, <job>/lease/* for the live worker count, <job>/finished,
// <job>/failed (a worker hit a non-retryable error: the value is the reason) and a "!job-error"
// decision. It blocks in wait_change() on <job>/gen (at most 500 ms at a time) — no busy polling.
//
// Store loss: when a request fails, the watcher reconnects (through `connect`) every 100 ms;
// unreachable for longer than `reconnect_timeout` (EDL_STORE_TIMEOUT_MS) makes store_lost() return the
// reason, naming the store URL. The launcher fails the job with it.
// Thread-safety: every public method from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
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
  std::map<std::string, std::string> dropped;  // members of an earlier generation left out of this one (dead or
                                               // stuck) -> the decider's reason (<job>/g<G>/dropped/<w>)
  std::chrono::steady_clock::time_point seen;
};

struct StoreWatcherOptions {
  std::string job_id;
  std::string store_url;                                // for messages (as LaunchOptions / Job)
  // EDL_STORE_TIMEOUT_MS: unreachable this long = the store is lost (as StoreOptions::reconnect_timeout)
  std::chrono::milliseconds reconnect_timeout{30000};
  std::function<std::shared_ptr<Store>()> connect;      // (re)connects; throws edl::Error
};

class StoreWatcher {
 public:
  StoreWatcher(std::shared_ptr<Store> store, StoreWatcherOptions options);
  ~StoreWatcher();

  std::vector<GenerationEvent> take_events();
  int live_workers() const { return live_.load(); }  // -1 until the first count
  bool finished() const { return finished_.load(); }
  std::string job_error() const;     // "!job-error" of the runtime, "" = none
  std::string job_failed() const;    // value of <job>/failed, "" = none
  bool unreachable() const { return unreachable_.load(); }  // the last request failed
  std::string store_lost() const;    // "" while the store answers within reconnect_timeout

  // The store connection of the watcher (null while reconnecting): for one-off reads by the loop.
  std::shared_ptr<Store> store() const;

 private:
  void loop();
  void poll_once(std::optional<std::string>* known, uint64_t* reported);
  void on_error(const std::string& what, std::chrono::steady_clock::time_point* since);  // since: last round that reached the store

  StoreWatcherOptions opt_;
  std::atomic<bool> stop_{false};
  std::atomic<int> live_{-1};
  std::atomic<bool> finished_{false};
  std::atomic<bool> unreachable_{false};
  mutable std::mutex mu_;
  std::shared_ptr<Store> store_;
  std::vector<GenerationEvent> events_;
  std::string job_error_, job_failed_, store_lost_;
  std::thread thread_;
};

}  // namespace edl::launcher
