// Store: the control plane of an EDL job — a small key/value service shared by all workers.
//
// Rendezvous, membership, liveness leases, the data-shard dispatcher and communicator bootstrap
// all go through this interface. Backends (docs/elastic.md):
//   memory://            in-process (tests; threads acting as ranks share one instance)
//   tcp://HOST:PORT      the embedded store server hosted by edl-run (the default)
//   redis://HOST:PORT    a real redis-server (jobs spanning machines or outliving a launcher)
//   etcd://[USER@]HOST:PORT[,HOST:PORT...]  an etcd 3.4 cluster through its JSON gateway (USER:
//                        etcd user whose password is the secret): txn for add and
//                        compare_set (exactly once across reconnects), watch for waits, one etcd lease
//                        per set_lease key (TTL rounded up to whole seconds); fails over between the
//                        listed members within reconnect_timeout (docs/store.md)
//
// Semantics every backend provides:
//   - set/get/del/keys are linearizable per key.
//   - add() and compare_set() are atomic read-modify-writes (the generation number is bumped with
//     compare_set: it is the fencing token of the elastic protocol).
//   - wait()/wait_change() block on the server side (or on a watch) — clients never poll in a loop.
//   - set_lease(key, value, ttl) creates or refreshes a key that disappears ttl after its last
//     refresh: liveness of workers. A waiter on such a key sees its deletion as a change.
// Errors: StoreError (server gone past StoreOptions::reconnect_timeout), AuthError (wrong job secret),
// InvalidArgument. A connection lost briefly is re-established by the tcp:// and redis:// clients;
// the etcd:// client fails over to another member.
// A timeout of a wait is not an error: wait() returns false, wait_change() returns the unchanged value.
//
// Thread-safety: every method may be called concurrently from any thread on one instance.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "edl/export.h"

namespace edl {

class EDL_API Store {
 public:
  virtual ~Store();

  virtual void set(const std::string& key, const std::string& value) = 0;
  // The value, or nullopt when the key is absent. Never blocks waiting for the key.
  virtual std::optional<std::string> get(const std::string& key) = 0;
  // Atomically adds delta to the decimal integer at key (absent = 0); returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Atomically: if the current value equals `expected` (nullopt = key absent) store `desired` and
  // return true; otherwise return false and, when `current` is given, put the current value there.
  virtual bool compare_set(const std::string& key, const std::optional<std::string>& expected,
                           const std::string& desired, std::optional<std::string>* current = nullptr) = 0;
  // Blocks until every key exists (true) or the timeout passes (false).
  virtual bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // Blocks until the value of key differs from `known` (nullopt = absent) or the timeout passes;
  // returns the value at that moment (which equals `known` on timeout).
  virtual std::optional<std::string> wait_change(const std::string& key, const std::optional<std::string>& known,
                                                 std::chrono::milliseconds timeout) = 0;
  // Removes key; returns whether it existed.
  virtual bool del(const std::string& key) = 0;
  // Every existing key that starts with prefix, sorted.
  virtual std::vector<std::string> keys(const std::string& prefix) = 0;
  // Creates or refreshes key=value; the key is deleted `ttl` after the last refresh.
  virtual void set_lease(const std::string& key, const std::string& value, std::chrono::milliseconds ttl) = 0;

  // The values of `keys` in their order (nullopt where absent), each read as get() reads it (not
  // one atomic snapshot of them all). The tcp:// client sends every request before it waits for a
  // reply: one round trip for the lot instead of one per key (a decider reading a thousand
  // arrivals, a rank reading its peers' addresses). The default calls get() for each key.
  virtual std::vector<std::optional<std::string>> get_many(const std::vector<std::string>& keys);

  // The values of `keys` as recently seen (nullopt where absent), for keys a caller reads over and
  // over (a worker reads the leases of the members it watches every heartbeat). A backend may serve
  // them from watch streams it keeps open on the keys while they are read (etcd://: no request per
  // read; docs/store.md), so a value may lag the store by the stream's delivery (or, on a stream that
  // stalled, by up to its renewal); per key it never moves back, and never behind a value that
  // get()/get_many() returned. A caller that acts on what it sees confirms with get_many(). The
  // default is get_many().
  virtual std::vector<std::optional<std::string>> get_many_watched(const std::vector<std::string>& keys);

  // Blocking get: waits up to timeout for key, then returns its value; throws StoreError on timeout.
  std::string get_wait(const std::string& key, std::chrono::milliseconds timeout);
};

// An in-process store (what Gloo calls HashStore). Cheap; for tests and single-process worlds.
EDL_API std::shared_ptr<Store> make_memory_store();

// A view of `base` that prepends `prefix` to every key (keys() strips it again).
EDL_API std::shared_ptr<Store> make_prefix_store(std::shared_ptr<Store> base, const std::string& prefix);

// Options for connecting to a store URL.
struct StoreOptions {
  std::string secret;                                    // job secret proved on connect; "" = none
  std::chrono::milliseconds connect_timeout{10000};      // give up connecting after 10 s
  std::chrono::milliseconds request_timeout{30000};      // a single non-blocking request: 30 s
  // A lost connection (store restart, TCP reset) is re-established with bounded exponential backoff
  // for up to this long (EDL_STORE_TIMEOUT_MS, default 30 s); pending calls are re-sent, blocking
  // waits resume with their remaining time, add()/compare_set() are applied exactly once
  // (docs/store.md, "Reconnect"). Past it every pending and later call throws StoreError naming the
  // URL. 0 = never reconnect.
  std::chrono::milliseconds reconnect_timeout{30000};
};

// Connects to "memory://NAME" (process-wide named in-memory store), "tcp://HOST:PORT",
// "redis://HOST:PORT" or "etcd://[USER@]HOST:PORT[,HOST:PORT...]". Throws InvalidArgument for a
// malformed URL, StoreError / AuthError otherwise.
EDL_API std::shared_ptr<Store> connect_store(const std::string& url, const StoreOptions& options = {});

}  // namespace edl
