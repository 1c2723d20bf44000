// StoreServer: the embedded TCP store that edl-run hosts for a job (tcp://HOST:PORT).
//
// One event-loop thread (epoll) serves any number of clients. Every connection must prove the job
// secret in its first frame (HMAC-SHA256 challenge/response, docs/store.md); a wrong or missing
// secret is logged and the connection closed. wait()/wait_change() block on the server, so clients
// never poll; leases expire on the server and wake waiters. Malformed, oversized or truncated
// frames close only the offending connection.
//
// Thread-safety: construct, query and stop() from any thread; stop() is idempotent and also run by
// the destructor. After stop() every client sees StoreError (connection lost).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "edl/export.h"

namespace edl {

struct StoreServerOptions {
  std::string bind_address = "127.0.0.1";      // listen address; "0.0.0.0" for multi-host jobs
  int port = 0;                                // 0 = an ephemeral port (see port())
  std::string secret;                          // job secret clients must prove ("" = the empty secret)
  size_t max_frame_bytes = size_t(64) << 20;   // frames above this close the connection: 64 MiB
};

class EDL_API StoreServer {
 public:
  // Binds, listens and starts the event loop. Throws StoreError naming the address if bind fails.
  explicit StoreServer(const StoreServerOptions& options = {});
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const;
  const std::string& bind_address() const;
  // "tcp://ADDRESS:PORT" (0.0.0.0 is reported as 127.0.0.1 so the URL is connectable locally).
  std::string url() const;
  // Stops the loop and closes every connection. Idempotent.
  void stop();

  // Counters for tests and diagnostics.
  size_t connection_count() const;      // currently open connections (authenticated or not)
  uint64_t rejected_auth_count() const;  // connections closed for a wrong / missing secret
  uint64_t bad_frame_count() const;      // connections closed for malformed / oversized frames

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace edl
