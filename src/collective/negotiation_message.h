// The negotiation message of the collective engine: what one rank tells all others in a round
// (engine.h, docs/collectives.md "Negotiation"), and its strict decoder.
//
//   magic u32 "EDLN" | cache size u32 | ceil(cache size / 64) u64 words: bitset of cached requests |
//   fresh count u32 | fresh count x (kind u8 | dtype u8 | op u8 | root i32 | count u64 |
//                                     name length u32 | name)
// Little-endian, written and read with the common codec (common/codec.h). The decoder checks every
// length against the bytes that are actually there before allocating (a count that cannot fit is
// refused, not reserved), the cache size against this rank's own, every cache bit below it, known
// kind / dtype / op, and that nothing trails; any violation is a CommError naming the sending rank
// and the field.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "collective/engine.h"
#include "edl/export.h"

namespace edl::codec {
class Reader;
}

namespace edl::collective {

struct NegotiationMessage {
  struct Fresh {
    Engine::Desc desc;
    std::string name;
  };
  uint32_t cache_size = 0;
  std::vector<uint32_t> cached;  // cache ids whose bit is set, ascending
  std::vector<Fresh> fresh;      // requests not in the cache, in the sender's order
};

constexpr uint32_t kNegotiationMagic = 0x45444c4eu;  // "EDLN"
constexpr size_t kFreshEntryMinBytes = 19;           // a fresh entry with an empty name

// `bits` has ceil(cache_size / 64) words.
EDL_API std::vector<uint8_t> encode_negotiation(uint32_t cache_size, const std::vector<uint64_t>& bits,
                                                const std::vector<NegotiationMessage::Fresh>& fresh);
// The pieces both negotiation messages (this one and the sparse mesh's, negotiation_reduce.h) are
// made of: a request descriptor (kind u8 | dtype u8 | op u8 | root i32 | count u64; check_desc
// refuses an unknown kind / dtype / op, naming the request) and the cache size, which must be this
// rank's. Violations throw codec::DecodeError.
void append_desc(std::vector<uint8_t>& out, const Engine::Desc& d);
Engine::Desc read_desc(codec::Reader& rd);
void check_desc(const codec::Reader& rd, const Engine::Desc& d, const std::string& name);
uint32_t read_cache_size(codec::Reader& rd, uint32_t cache_size);

// Decodes rank `sender`'s message; `cache_size` is this rank's response cache size (they must agree).
EDL_API NegotiationMessage decode_negotiation(const uint8_t* p, size_t n, uint32_t cache_size, int sender);

}  // namespace edl::collective
