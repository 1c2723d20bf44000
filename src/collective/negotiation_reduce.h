// The engine's negotiation on the sparse mesh (docs/collectives.md, "Negotiation at scale"): instead
// of an allgather of every rank's message (n messages of everything to every rank), one message
// that recursive doubling combines (TcpCommunicator::reduce_messages): log2(n) exchanges per round,
// each message about as small as one rank's.
//
//   magic u32 "EDLQ" | cache size u32 | flags u32 | ranks u32 |
//   all: ceil(cache size / 64) u64 words | any: as many words | record count u32 | records
//   record: name str | count u32 | lo rank i32 | lo position u32 | lo descriptor | bad rank i32 |
//           bad descriptor          (descriptor: kind u8 | dtype u8 | op u8 | root i32 | count u64)
//
// `all` / `any`: the response cache entries that every / some rank of the block lists (by its bit,
// or with a changed descriptor); merged by AND / OR. A record stands for a name some rank sent in
// full (a new name, or a cached one whose descriptor changed): how many ranks of the block sent it,
// the lowest of them with its position in that rank's message and its descriptor, and the lowest
// rank whose descriptor differs from that one. Records are kept sorted by name; merging two blocks
// adds the counts and keeps the lower block's lowest rank: the same associative rule as the
// collectives' agreement (agreement.h), so after the combine every rank knows rank 0's descriptor
// and the lowest rank that disagrees with it, exactly what the allgather told.
// flags bit 0: some rank wants exact presence counts (a request waited long enough for the stall
// warning or the request deadline); then every rank runs a second, rare combine of a Detail.
//
// Detail: magic u32 "EDLD" | key count u32 | per key: ranks listing it u32 | lowest rank listing it
// by its cache bit i32 (0x7fffffff: none); merged by sum and min, over a key list every rank derived
// from the same first combine.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collective/engine.h"
#include "edl/export.h"

namespace edl::collective {

struct ReducedNegotiation {
  struct Record {
    std::string name;
    uint32_t count = 0;
    int32_t lo_rank = 0;
    uint32_t lo_pos = 0;
    Engine::Desc lo_desc;
    int32_t bad_rank = -1;
    Engine::Desc bad_desc;
  };
  static constexpr uint32_t kWantCounts = 1;
  uint32_t cache_size = 0;
  uint32_t flags = 0;
  uint32_t ranks = 1;
  std::vector<uint64_t> all;
  std::vector<uint64_t> any;
  std::vector<Record> fresh;  // sorted by name, unique
};

struct NegotiationDetail {
  static constexpr int32_t kNone = 0x7fffffff;
  std::vector<uint32_t> count;
  std::vector<int32_t> lowest_bit_rank;
};

EDL_API std::vector<uint8_t> encode_reduced(const ReducedNegotiation& m);
// Decodes a message of a block of ranks of a communicator of `size`; every field is checked (see
// above); a violation is a CommError naming `from`.
EDL_API ReducedNegotiation decode_reduced(const uint8_t* p, size_t n, uint32_t cache_size, int size,
                                          const std::string& from);
// Merges `theirs` into `mine`; `mine_lower`: `mine` stands for the lower ranks.
EDL_API void merge_reduced(ReducedNegotiation& mine, const ReducedNegotiation& theirs, bool mine_lower);

std::vector<uint8_t> encode_detail(const NegotiationDetail& d);
NegotiationDetail decode_detail(const uint8_t* p, size_t n, size_t keys, int size, const std::string& from);
void merge_detail(NegotiationDetail& mine, const NegotiationDetail& theirs);

// Runs fn (a negotiation collective on `comm`) without spinning when this rank lists nothing
// (negotiation.cc): it mostly waits for other ranks then.
void run_quietly(Communicator& comm, bool idle, const std::function<void()>& fn);

}  // namespace edl::collective
