// Client of the embedded TCP store (tcp://HOST:PORT), created through connect_store().
//
// One TCP connection (TCP_NODELAY) carries every request tagged with an id; a reader thread routes
// responses back, so a thread blocked in wait() never blocks set() from another thread. A lost
// connection fails every pending and later call with StoreError naming the address.
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
