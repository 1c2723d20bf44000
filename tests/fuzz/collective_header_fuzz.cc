// libFuzzer target for the collective header check (src/collective/wire_header.cc).
//
// The input is a peer's 48-byte header, this rank's own header and the max_gather_bytes cap.
// Findings: a crash or sanitizer report, or a header accepted although one of its lengths is not
// bounded (count * dtype size overflows, a payload the kind does not allow, an allgather above the
// cap, a payload above the cap for a call this rank did not make).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "collective/tcp_internal.h"

using edl::collective::TcpCommunicator;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  TcpCommunicator::Header h{}, mine{};
  uint64_t cap = 0;
  if (size < sizeof(h)) return 0;
  std::memcpy(&h, data, sizeof(h));
  if (size >= 2 * sizeof(h)) std::memcpy(&mine, data + sizeof(h), sizeof(mine));
  if (size >= 2 * sizeof(h) + 8) std::memcpy(&cap, data + 2 * sizeof(h), 8);
  else cap = uint64_t{1} << 30;
  const int peer = h.rank;  // half the inputs pass the rank check
  std::string problem = edl::collective::header_problem(h, mine, peer, cap);
  if (!problem.empty()) return 0;
  if (h.kind < 1 || h.kind > 4) std::abort();
  if (h.kind == 4) {
    if (h.count != 0 || h.payload != 0) std::abort();
    return 0;
  }
  const uint64_t es = edl::dtype_size(static_cast<edl::DataType>(h.dtype));
  unsigned __int128 bytes = static_cast<unsigned __int128>(h.count) * es;
  if (bytes >> 64) std::abort();
  if (h.payload != 0 && h.payload != static_cast<uint64_t>(bytes)) std::abort();
  if (h.kind == 3 && static_cast<uint64_t>(bytes) > cap) std::abort();
  const bool same = h.kind == mine.kind && h.dtype == mine.dtype && h.count == mine.count;
  if (!same && h.payload > cap) std::abort();
  return 0;
}
