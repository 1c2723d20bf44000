// StateWire: the byte protocol between a stop-free newcomer (state_fetch.h) and the state servers of
// the survivors (state_server.h), docs/elastic.md "Stop-free joins".
//
//   connect    the newcomer dials a survivor's server and runs the collective mesh handshake
//              (collective/mesh_handshake.h) as rank `newcomer` dialling rank `survivor` of the
//              current generation, with the prefix tag fnv1a("edl-state/" + job): both ends prove
//              the job secret, and a connection of another job or generation is refused.
//   request    32 bytes: "EDLSFRQ1" | step i64 | offset u64 | length u64
//              = bytes [offset, offset + length) of the *tensor space* of the survivor's commit of
//              `step`: the payloads of the State's tensor items, concatenated in registration order.
//   reply      32 bytes: "EDLSFRP1" | status u32 | 0 u32 | total u64 | length u64, then `length`
//              bytes when status = kOk. total = the size of the tensor space of that commit.
// Integers little-endian (common/codec.h). A connection carries any number of request/reply pairs.
//
// Thread-safety: pure functions and per-connection helpers, used by one thread per socket.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "collective/mesh_handshake.h"

namespace edl::elastic::state_wire {

using Clock = std::chrono::steady_clock;

constexpr size_t kRequestBytes = 32;
constexpr size_t kReplyBytes = 32;

enum Status : uint32_t {
  kOk = 0,
  kNotCommitted = 1,  // the survivor has no commit of that step (it passed it without committing, or moved on)
  kBadRange = 2,      // the range lies outside the commit's tensor space
};

struct Request {
  int64_t step = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};

struct Reply {
  uint32_t status = kOk;
  uint64_t total = 0;
  uint64_t length = 0;
};

std::string encode(const Request& r);
std::string encode(const Reply& r);
// DataError naming the message when the bytes are not one (bad magic).
Request decode_request(const uint8_t* p);
Reply decode_reply(const uint8_t* p);

// The handshake identity of generation `generation` of `size` members of `job`.
collective::mesh::Identity identity(const std::string& job, uint64_t generation, int size, const std::string& secret);

// A list of byte ranges (iovec) read or written in order; advance() consumes from the front.
class IovCursor {
 public:
  IovCursor() = default;
  explicit IovCursor(std::vector<iovec> v) : v_(std::move(v)) { skip_empty(); }
  bool done() const { return i_ >= v_.size(); }
  iovec* data() { return v_.data() + i_; }
  int count() const { return static_cast<int>(std::min<size_t>(v_.size() - i_, 64)); }
  void advance(size_t n);

 private:
  void skip_empty();
  std::vector<iovec> v_;
  size_t i_ = 0;
};

// The ranges of `space` (a tensor space as a list of pieces) covering [offset, offset + length).
// The caller checked that the range lies inside it.
std::vector<iovec> cut(const std::vector<iovec>& space, uint64_t offset, uint64_t length);
uint64_t total_bytes(const std::vector<iovec>& space);

// Outcome of a blocking transfer with a deadline and a cancel flag.
enum class Io { kOk, kClosed, kTimeout, kCancelled };
// Sends / receives everything `cur` describes on a non-blocking socket. *err gets errno (or 0).
Io send_all(int fd, IovCursor& cur, Clock::time_point deadline, const std::atomic<bool>* cancel, int* err);
Io recv_all(int fd, IovCursor& cur, Clock::time_point deadline, const std::atomic<bool>* cancel, int* err);
// One nonblocking step of recv_all (the fetcher multiplexes several sockets): kOk when `cur` is
// done, kTimeout when it would block, kClosed on EOF / error.
Io recv_some(int fd, IovCursor& cur, int* err);

// The newcomer's side of the handshake on a connected socket: returns "" on success, else why it
// failed; *auth is set when the survivor proved another secret.
std::string connect_handshake(int fd, const collective::mesh::Identity& id, int my_rank, int peer,
                              Clock::time_point deadline, const std::atomic<bool>* cancel, bool* auth);
// The survivor's side: "" on success, else why the connection was refused.
std::string accept_handshake(int fd, const collective::mesh::Identity& id, int my_rank, Clock::time_point deadline,
                             const std::atomic<bool>* cancel);

}  // namespace edl::elastic::state_wire
