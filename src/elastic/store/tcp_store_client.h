// Client of the embedded TCP store (tcp://HOST:PORT), created through connect_store().
//
// One TCP connection (TCP_NODELAY) carries every request tagged with an id; an io thread routes
// responses back, so a thread blocked in wait() never blocks set() from another thread. A lost
// connection is redialled with backoff for StoreOptions::reconnect_timeout and every unanswered
// request re-sent with its id (the server's replay journal applies add/compare_set once); past the
// window every pending and later call throws StoreError naming the address (docs/store.md).
// Thread-safety: every Store method may be called from any thread.
#pragma once

#include <memory>
#include <string>

#include "edl/store.h"

namespace edl::store {

// Connects and proves options.secret. Throws StoreError (unreachable, protocol mismatch) or
// AuthError (secret rejected), each naming the address.
std::shared_ptr<Store> connect_tcp_store(const std::string& host, int port, const StoreOptions& options);

}  // namespace edl::store
