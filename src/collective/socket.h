// Socket plumbing of the TCP transport: listening, connecting with a deadline, peer addresses,
// and non-blocking scatter/gather send/recv that classify errors into EDL's typed exceptions.
//
// Thread-safety: free functions on file descriptors owned by the caller.
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/host_port.h"
#include "edl/export.h"

namespace edl::collective {

using Clock = std::chrono::steady_clock;

// Whether "host:port" (or a bare host) names a loopback address (127.0.0.0/8, ::1, localhost):
// a peer published there runs on this host.
EDL_API bool is_loopback_address(const std::string& host_port);

// FNV-1a, used for the mesh handshake's prefix tag.
EDL_API uint64_t fnv1a(const std::string& s);

// Listens on address:0; returns the fd and puts the chosen port in *port. Throws CommError.
// With `prefer` > 0 it listens on that port when it is free, else on any port; with `prefer` != 0
// the socket has SO_REUSEADDR (as its accepted connections then), so that a later listener can take
// its port again while those connections live (-1: any port, reusable later).
EDL_API int listen_any_port(const std::string& address, int* port, int prefer = 0);
// Connects to "host:port" before deadline (retrying refused connections). Returns fd or -1 when the
// deadline passed; throws CommError for a malformed address, InvalidArgument when the process is out
// of file descriptors. With `refused` given, a refused connection is not retried: -1 and *refused.
EDL_API int connect_until(const std::string& host_port, Clock::time_point deadline, bool* refused = nullptr);
// Non-blocking, TCP_NODELAY, large buffers.
void tune_data_socket(int fd);
void set_nonblocking(int fd, bool on);

// Writes all of buf within the deadline (poll-based); false on error / deadline.
EDL_API bool write_all(int fd, const void* buf, size_t n, Clock::time_point deadline);

// Result of one non-blocking transfer attempt.
struct IoResult {
  size_t bytes = 0;  // transferred
  int err = 0;       // 0, or errno (EPIPE/ECONNRESET/...); -1 = orderly EOF on receive
};
IoResult try_sendv(int fd, const iovec* iov, int iovcnt);
IoResult try_recvv(int fd, iovec* iov, int iovcnt);

// errno_text(): common/host_port.h.
// "host:port" of the other end of a connected socket ("?" if unknown), for messages.
std::string peer_address(int fd);

}  // namespace edl::collective
