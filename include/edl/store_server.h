// StoreServer: the embedded TCP store that edl-run hosts for a job (tcp://HOST:PORT).
//
// One event-loop thread (epoll) serves any number of clients. Every connection must prove the job
// secret in its first frame (HMAC-SHA256 challenge/response, docs/store.md); a wrong or missing
// secret is logged and the connection closed. Before a connection has authenticated the server
// reads at most max_unauthenticated_bytes from it (4 KiB; AUTH is ~100 bytes); at most
// max_unauthenticated such connections exist (a newer one closes the oldest) and at most
// max_connections in all (more are accepted and closed at once). An exception while serving one
// connection closes that connection, never the loop. Each authenticated client's id (sent in AUTH)
// keys a small replay journal so that a request re-sent after a reconnect is not applied twice.
// wait()/wait_change() block on the server, so clients never poll; leases expire on the server and
// wake waiters — only after the loop has read every request that had arrived (a refresh waiting in
// the server's input, e.g. while the machine was too busy to run the loop, never loses a lease). Malformed, oversized or truncated frames close only the offending connection; so
// does a connection that does not authenticate within handshake_timeout. A client that stops reading its replies is throttled: once
// max_pending_output_bytes are queued for it, its further requests are not read until it drains.
//
// Thread-safety: construct, query and stop() from any thread; stop() is idempotent and also run by
// the destructor. After stop() clients try to reconnect (StoreOptions::reconnect_timeout).
#pragma once

#include <chrono>
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
  std::chrono::milliseconds handshake_timeout{10000};  // a connection that has not authenticated by then is closed
  size_t max_pending_output_bytes = size_t(64) << 20;  // replies queued for a client that does not read:
                                                        // above this, its requests wait (back-pressure)
  size_t max_connections = 4096;               // open connections; above it new ones are closed at once
  size_t max_unauthenticated = 256;            // connections still in the handshake; a new one closes the oldest
  size_t max_unauthenticated_bytes = 4096;     // bytes read from a connection before it authenticates
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
  uint64_t throttle_count() const;       // times a connection was paused for not reading its replies
  uint64_t refused_count() const;        // connections closed by max_connections / max_unauthenticated /
                                         // max_unauthenticated_bytes
  uint64_t replay_count() const;         // re-sent requests answered from the replay journal
  uint64_t request_count() const;        // requests served (every authenticated frame, waits included)
  std::chrono::nanoseconds cpu_time() const;  // CPU time of the event-loop thread so far

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace edl
