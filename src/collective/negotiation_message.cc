#include "collective/negotiation_message.h"

#include "common/codec.h"
#include "edl/error.h"

namespace edl::collective {

std::vector<uint8_t> encode_negotiation(uint32_t cache_size, const std::vector<uint64_t>& bits,
                                        const std::vector<NegotiationMessage::Fresh>& fresh) {
  std::vector<uint8_t> msg;
  codec::Writer<std::vector<uint8_t>> w(msg);
  w.u32(kNegotiationMagic);
  w.u32(cache_size);
  for (uint64_t word : bits) w.u64(word);
  w.u32(static_cast<uint32_t>(fresh.size()));
  for (const auto& f : fresh) {
    w.u8(f.desc.kind);
    w.u8(f.desc.dtype);
    w.u8(f.desc.op);
    w.i32(f.desc.root);
    w.u64(f.desc.count);
    w.str(f.name, "request name");
  }
  return msg;
}

namespace {

void read_cache_bits(codec::Reader& rd, uint32_t cache_size, NegotiationMessage* m) {
  const size_t words = (static_cast<size_t>(cache_size) + 63) / 64;
  for (size_t w = 0; w < words; ++w) {
    uint64_t word = rd.u64("cache bitset");
    while (word) {
      const size_t id = w * 64 + static_cast<size_t>(__builtin_ctzll(word));
      word &= word - 1;
      if (id >= cache_size) rd.fail("it sets cache bit " + std::to_string(id) + " beyond the cache");
      m->cached.push_back(static_cast<uint32_t>(id));
    }
  }
}

NegotiationMessage::Fresh read_fresh(codec::Reader& rd) {
  NegotiationMessage::Fresh f;
  f.desc.kind = rd.u8("kind");
  f.desc.dtype = rd.u8("dtype");
  f.desc.op = rd.u8("op");
  f.desc.root = rd.i32("root");
  f.desc.count = rd.u64("count");
  f.name = std::string(rd.str("request name"));
  if (f.desc.kind < kAllreduce || f.desc.kind > kLastKind || f.desc.dtype > static_cast<uint8_t>(DataType::kUInt8) ||
      f.desc.op > static_cast<uint8_t>(ReduceOp::kProduct))
    rd.fail("request '" + f.name + "' has unknown kind/dtype/op " + std::to_string(f.desc.kind) + "/" +
            std::to_string(f.desc.dtype) + "/" + std::to_string(f.desc.op));
  return f;
}

NegotiationMessage decode(codec::Reader& rd, uint32_t cache_size) {
  NegotiationMessage m;
  if (rd.u32("magic") != kNegotiationMagic) rd.fail("corrupt (bad magic)");
  m.cache_size = rd.u32("cache size");
  if (m.cache_size != cache_size)
    rd.fail("a response cache of " + std::to_string(m.cache_size) + " entries, this rank " +
            std::to_string(cache_size) + " (the caches diverged)");
  read_cache_bits(rd, cache_size, &m);
  const uint32_t nf = rd.count("fresh request count", kFreshEntryMinBytes);
  m.fresh.reserve(nf);
  for (uint32_t i = 0; i < nf; ++i) m.fresh.push_back(read_fresh(rd));
  rd.finish();
  return m;
}

}  // namespace

NegotiationMessage decode_negotiation(const uint8_t* p, size_t n, uint32_t cache_size, int sender) {
  codec::Reader rd(p, n, "collective engine: negotiation message of rank " + std::to_string(sender));
  try {
    return decode(rd, cache_size);
  } catch (const codec::DecodeError& e) {
    throw CommError(e.what());
  }
}

}  // namespace edl::collective
