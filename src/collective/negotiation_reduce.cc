// The reduced negotiation message of the sparse mesh and its merge (negotiation_reduce.h).
#include "collective/negotiation_reduce.h"

#include <algorithm>

#include "collective/negotiation_message.h"
#include "common/codec.h"
#include "edl/error.h"

namespace edl::collective {
namespace {

constexpr uint32_t kReducedMagic = 0x51444c45u;  // "EDLQ"
constexpr uint32_t kDetailMagic = 0x44444c45u;   // "EDLD"
constexpr size_t kRecordMinBytes = 4 + 4 + 4 + 4 + 15 + 4 + 15;

ReducedNegotiation decode(codec::Reader& rd, uint32_t cache_size, int size) {
  ReducedNegotiation m;
  if (rd.u32("magic") != kReducedMagic) rd.fail("corrupt (bad magic)");
  m.cache_size = read_cache_size(rd, cache_size);
  m.flags = rd.u32("flags");
  m.ranks = rd.u32("ranks");
  if (m.ranks < 1 || m.ranks > static_cast<uint32_t>(size)) rd.fail("it stands for " + std::to_string(m.ranks) + " ranks");
  const size_t words = (static_cast<size_t>(cache_size) + 63) / 64;
  for (auto* v : {&m.all, &m.any}) {
    v->resize(words);
    for (auto& word : *v) word = rd.u64("cache bitset");
  }
  for (size_t w = 0; w < words; ++w) {
    if ((m.all[w] & ~m.any[w]) != 0) rd.fail("a cache entry is listed by all ranks but not by any");
    const size_t bits = std::min<size_t>(64, cache_size - 64 * w);
    if (bits < 64 && (m.any[w] >> bits) != 0) rd.fail("it sets a cache bit beyond the cache");
  }
  const uint32_t nr = rd.count("record count", kRecordMinBytes);
  m.fresh.resize(nr);
  for (uint32_t i = 0; i < nr; ++i) {
    auto& r = m.fresh[i];
    r.name = std::string(rd.str("request name"));
    if (i > 0 && !(m.fresh[i - 1].name < r.name)) rd.fail("its requests are not sorted by name");
    r.count = rd.u32("count");
    r.lo_rank = rd.i32("lowest rank");
    r.lo_pos = rd.u32("position");
    r.lo_desc = read_desc(rd);
    check_desc(rd, r.lo_desc, r.name);
    r.bad_rank = rd.i32("differing rank");
    r.bad_desc = read_desc(rd);
    if (r.bad_rank != -1) check_desc(rd, r.bad_desc, r.name);
    if (r.count < 1 || r.count > m.ranks || r.lo_rank < 0 || r.lo_rank >= size ||
        (r.bad_rank != -1 && (r.bad_rank <= r.lo_rank || r.bad_rank >= size)))
      rd.fail("request '" + r.name + "' has count " + std::to_string(r.count) + ", ranks " + std::to_string(r.lo_rank) +
              " and " + std::to_string(r.bad_rank));
  }
  rd.finish();
  return m;
}

}  // namespace

std::vector<uint8_t> encode_reduced(const ReducedNegotiation& m) {
  std::vector<uint8_t> out;
  codec::Writer<std::vector<uint8_t>> w(out);
  w.u32(kReducedMagic);
  w.u32(m.cache_size);
  w.u32(m.flags);
  w.u32(m.ranks);
  for (uint64_t word : m.all) w.u64(word);
  for (uint64_t word : m.any) w.u64(word);
  w.u32(static_cast<uint32_t>(m.fresh.size()));
  for (const auto& r : m.fresh) {
    w.str(r.name, "request name");
    w.u32(r.count);
    w.i32(r.lo_rank);
    w.u32(r.lo_pos);
    append_desc(out, r.lo_desc);
    w.i32(r.bad_rank);
    append_desc(out, r.bad_desc);
  }
  return out;
}

ReducedNegotiation decode_reduced(const uint8_t* p, size_t n, uint32_t cache_size, int size, const std::string& from) {
  codec::Reader rd(p, n, "collective engine: negotiation message of " + from);
  try {
    return decode(rd, cache_size, size);
  } catch (const codec::DecodeError& e) {
    throw CommError(e.what());
  }
}

void merge_reduced(ReducedNegotiation& mine, const ReducedNegotiation& theirs, bool mine_lower) {
  const ReducedNegotiation& lo = mine_lower ? mine : theirs;
  const ReducedNegotiation& hi = mine_lower ? theirs : mine;
  ReducedNegotiation out;
  out.cache_size = lo.cache_size;
  out.flags = lo.flags | hi.flags;
  out.ranks = lo.ranks + hi.ranks;
  out.all.resize(lo.all.size());
  out.any.resize(lo.any.size());
  for (size_t w = 0; w < lo.all.size(); ++w) {
    out.all[w] = lo.all[w] & hi.all[w];
    out.any[w] = lo.any[w] | hi.any[w];
  }
  out.fresh.reserve(lo.fresh.size() + hi.fresh.size());
  size_t i = 0, j = 0;
  while (i < lo.fresh.size() || j < hi.fresh.size()) {
    if (j == hi.fresh.size() || (i < lo.fresh.size() && lo.fresh[i].name < hi.fresh[j].name)) {
      out.fresh.push_back(lo.fresh[i++]);
    } else if (i == lo.fresh.size() || hi.fresh[j].name < lo.fresh[i].name) {
      out.fresh.push_back(hi.fresh[j++]);
    } else {  // the same name on both sides: the lower block's lowest rank, the lowest differing rank
      ReducedNegotiation::Record r = lo.fresh[i];
      const auto& u = hi.fresh[j];
      r.count += u.count;
      const bool differs = !(u.lo_desc == r.lo_desc);
      const int32_t cand = differs ? u.lo_rank : u.bad_rank;
      if (cand >= 0 && (r.bad_rank < 0 || cand < r.bad_rank)) {
        r.bad_rank = cand;
        r.bad_desc = differs ? u.lo_desc : u.bad_desc;
      }
      out.fresh.push_back(std::move(r));
      ++i, ++j;
    }
  }
  mine = std::move(out);
}

std::vector<uint8_t> encode_detail(const NegotiationDetail& d) {
  std::vector<uint8_t> out;
  codec::Writer<std::vector<uint8_t>> w(out);
  w.u32(kDetailMagic);
  w.u32(static_cast<uint32_t>(d.count.size()));
  for (size_t k = 0; k < d.count.size(); ++k) {
    w.u32(d.count[k]);
    w.i32(d.lowest_bit_rank[k]);
  }
  return out;
}

NegotiationDetail decode_detail(const uint8_t* p, size_t n, size_t keys, int size, const std::string& from) {
  codec::Reader rd(p, n, "collective engine: negotiation detail of " + from);
  try {
    if (rd.u32("magic") != kDetailMagic) rd.fail("corrupt (bad magic)");
    if (rd.u32("key count") != keys) rd.fail("another key count than this rank's " + std::to_string(keys));
    NegotiationDetail d;
    d.count.resize(keys);
    d.lowest_bit_rank.resize(keys);
    for (size_t k = 0; k < keys; ++k) {
      d.count[k] = rd.u32("count");
      d.lowest_bit_rank[k] = rd.i32("lowest rank");
      if (d.count[k] > static_cast<uint32_t>(size) ||
          (d.lowest_bit_rank[k] != NegotiationDetail::kNone && (d.lowest_bit_rank[k] < 0 || d.lowest_bit_rank[k] >= size)))
        rd.fail("key " + std::to_string(k) + " has count " + std::to_string(d.count[k]) + " and rank " +
                std::to_string(d.lowest_bit_rank[k]));
    }
    rd.finish();
    return d;
  } catch (const codec::DecodeError& e) {
    throw CommError(e.what());
  }
}

void merge_detail(NegotiationDetail& mine, const NegotiationDetail& theirs) {
  for (size_t k = 0; k < mine.count.size(); ++k) {
    mine.count[k] += theirs.count[k];
    mine.lowest_bit_rank[k] = std::min(mine.lowest_bit_rank[k], theirs.lowest_bit_rank[k]);
  }
}

}  // namespace edl::collective
