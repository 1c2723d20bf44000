// Free loopback ports for the servers tests and benches start (redis-server, etcd, edl-run's
// store): bind 127.0.0.1:0 and read the port back, never a fixed port (other jobs share the host).
// A port is free when chosen; another process may still take it before the server binds it, so the
// fixtures retry their start-up on "address already in use".
//
// Thread-safety: pure functions.
#pragma once

#include <vector>

namespace edl::testing {

// A port that was free a moment ago (bound to 127.0.0.1:0, then released). Throws
// std::runtime_error when no socket can be bound.
int free_port();

// n distinct free ports: every socket stays bound until all n are chosen.
std::vector<int> free_ports(int n);

}  // namespace edl::testing
