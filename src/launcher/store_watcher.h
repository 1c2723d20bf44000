// StoreWatcher: edl-run's view of the elastic protocol. A background thread watches the keys the
// worker-side runtime writes (src/elastic/keys.h, docs/elastic.md): <job>/gen and
// <job>/g<G>/members for generations, <job>/lease/* for the live worker count, <job>/finished,
// <job>/failed (a worker hit a non-retryable error: the value is the reason) and a "!job-error"
// decision; and, for the observability rules, <job>/throughput and <job>/straggler/*. It blocks in
// wait_change() on <job>/gen (at most 500 ms at a time) — no busy polling.
//
// Store loss: when a request fails, the watcher reconnects (through `connect`) every 100 ms;
// once a request has failed, `reconnect_timeout` (EDL_STORE_TIMEOUT_MS) after the last round that reached
// the store store_lost() returns the reason, naming the store URL — on time, even while a request
// or a reconnect of the watcher is still hanging. The launcher fails the job with it.
// Thread-safety: every public method from any thread. The destructor does not wait for a request
// hanging on an unreachable store: the thread is left to finish it on its own (its state is shared).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
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
  int live_workers() const;  // -1 until the first count
  bool finished() const;
  std::string job_error() const;     // "!job-error" of the runtime, "" = none
  std::string job_failed() const;    // value of <job>/failed, "" = none
  bool unreachable() const;          // the last request failed
  // "" unless a request failed and no round reached the store for reconnect_timeout: then the reason.
  std::string store_lost() const;

  // Observability (docs/observability.md): rank 0's latest <job>/throughput value ("" = none yet)
  // and the straggler reports, <job>/straggler/<worker> -> report.
  std::string throughput() const;
  std::map<std::string, std::string> stragglers() const;

  // The store connection of the watcher (null while reconnecting): for one-off reads by the loop.
  std::shared_ptr<Store> store() const;

 private:
  struct State;  // everything the thread touches: shared with it, so that it may outlive the watcher
  static void loop(const std::shared_ptr<State>& s);
  static void poll_once(State& s, std::optional<std::string>* known, uint64_t* reported);
  static void on_error(State& s, const std::string& what);

  std::shared_ptr<State> s_;
  std::thread thread_;
};

}  // namespace edl::launcher
