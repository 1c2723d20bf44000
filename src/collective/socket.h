// Socket plumbing of the TCP transport: listening, connecting with a deadline, the mesh handshake,
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

// The first bytes on every mesh connection, both directions (connector sends, acceptor answers).
struct Hello {
  uint64_t magic;       // kHelloMagic
  uint64_t generation;  // CommunicatorOptions::generation
  uint64_t prefix_tag;  // hash of the store prefix: connections of other jobs never cross
  int32_t rank;         // sender's rank
  int32_t size;         // sender's world size
};
static_assert(sizeof(Hello) == 32, "Hello is a 32-byte wire struct");
constexpr uint64_t kHelloMagic = 0x45444c4d45534831ull;  // "EDLMESH1"

// FNV-1a, used for Hello::prefix_tag.
EDL_API uint64_t fnv1a(const std::string& s);

// Listens on address:0; returns the fd and puts the chosen port in *port. Throws CommError.
int listen_any_port(const std::string& address, int* port);
// Connects to "host:port" before deadline (retrying refused connections). Returns fd or -1 when the
// deadline passed; throws CommError for a malformed address.
EDL_API int connect_until(const std::string& host_port, Clock::time_point deadline);
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

}  // namespace edl::collective
