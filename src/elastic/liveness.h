// Liveness: the lease value a worker publishes and its liveness probe — a listening TCP socket that
// exists exactly as long as the worker's process. After kill -9 the kernel closes it and refuses
// connections at once; a stopped (SIGSTOP) or busy process still accepts in the kernel, so a
// refused probe proves death and nothing else does. Protocol: docs/elastic.md, "Rendezvous".
// Thread-safety: pure functions (each opens its own sockets).
#pragma once

#include <cstdint>
#include <string>

namespace edl::elastic {

// A lease value: "<beat> <host> <wall ms> <probe addr:port>" (the wall-clock stamp is informative
// only: no liveness decision compares it with another host's clock).
struct LeaseValue {
  std::string host;
  int64_t wall = 0;
  std::string probe_addr;
  int probe_port = 0;
};

LeaseValue parse_lease(const std::string& v);

// Opens a listening probe socket on bind_address (port chosen by the kernel, returned in *port).
// Returns the fd, or -1 on failure.
int open_probe(const std::string& bind_address, int* port);

// True when a connect to the probe in `v` is refused (the process is gone). Anything else —
// accepted, timed out, unreachable, no probe — proves nothing and returns false. A loopback probe
// is only tried from the member's own host (`my_host`).
bool probe_refused(const LeaseValue& v, const std::string& my_host);
// The same for a member of `host` whose probe is `probe` ("addr:port" as published in its lease, its
// arrival and the member list; "" = none: proves nothing).
bool probe_refused(const std::string& host, const std::string& probe, const std::string& my_host);

}  // namespace edl::elastic
