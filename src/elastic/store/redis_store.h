// Redis backend of the Store interface (redis://HOST:PORT), created through connect_store().
//
// Two hiredis connections: one for commands (serialised by a mutex) and one subscribed to keyspace
// notifications (PSUBSCRIBE __keyspace@0__:*; the client enables notify-keyspace-events "KA" when
// the server lacks it). wait()/wait_change() re-read a key only when a notification for it arrives,
// so they never poll; lease expiry (SET PX) produces an "expired" notification that wakes waiters.
// compare_set and add are Lua scripts (atomic on the server) that also record their outcome under a
// per-request key, so a retry after a reconnect is applied once. A lost connection is redialled
// with backoff for StoreOptions::reconnect_timeout (docs/store.md, "Reconnect"). The job secret is
// sent with AUTH (redis requirepass). Keys are namespaced by the caller (the Runtime's prefixes).
// Thread-safety: every Store method may be called from any thread.
#pragma once

#include <memory>
#include <string>

#include "edl/store.h"

namespace edl::store {

// Throws StoreError (unreachable, notifications unavailable) or AuthError (password rejected/required).
std::shared_ptr<Store> connect_redis_store(const std::string& host, int port, const StoreOptions& options);

}  // namespace edl::store
