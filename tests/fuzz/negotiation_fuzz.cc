// libFuzzer target for the engine's negotiation message decoder (src/collective/negotiation_message.cc).
//
// The first two input bytes give this rank's response cache size (0..65535), the rest is a peer's
// message. Findings: a crash or sanitizer report (e.g. an allocation sized by an unchecked count),
// a rejection that is not a CommError, or an accepted message that does not re-encode to exactly
// the same bytes (the decoder must accept only canonical messages it fully understood).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "collective/negotiation_message.h"
#include "edl/error.h"

using namespace edl::collective;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint32_t cache = static_cast<uint32_t>(data[0]) | (static_cast<uint32_t>(data[1]) << 8);
  NegotiationMessage m;
  try {
    m = decode_negotiation(data + 2, size - 2, cache, 1);
  } catch (const edl::CommError&) {
    return 0;
  }
  std::vector<uint64_t> bits((cache + 63) / 64, 0);
  for (uint32_t id : m.cached) {
    if (id >= cache) std::abort();
    bits[id / 64] |= 1ull << (id % 64);
  }
  std::vector<uint8_t> again = encode_negotiation(m.cache_size, bits, m.fresh);
  if (again.size() != size - 2 || std::memcmp(again.data(), data + 2, again.size()) != 0) std::abort();
  return 0;
}
