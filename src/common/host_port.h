// Small text helpers every layer needs and that must read the same everywhere: "HOST:PORT"
// addresses (the transport's peer addresses, store URLs, the membership probe address) and the text
// of an errno value. Callers wrap a problem in their own typed error (docs/errors.md).
//
// Thread-safety: pure functions, safe from any thread.
#pragma once

#include <string>

namespace edl {

// Splits "HOST:PORT" at the last ':'; HOST may be a bracketed IPv6 address ("[::1]:80" gives
// "::1"). Returns "" on success, else what is wrong ("missing host or port", "port is not a
// number", "port out of range 1..65535", "host contains '/'"); *host and *port are then unspecified.
std::string split_host_port(const std::string& text, std::string* host, int* port);

// strerror(err), thread-safe.
std::string errno_text(int err);

}  // namespace edl
