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
    append_desc(msg, f.desc);
    w.str(f.name, "request name");
  }
  return msg;
}

void append_desc(std::vector<uint8_t>& out, const Engine::Desc& d) {
  codec::Writer<std::vector<uint8_t>> w(out);
  w.u8(d.kind);
  w.u8(d.dtype);
  w.u8(d.op);
  w.i32(d.root);
  w.u64(d.count);
}

Engine::Desc read_desc(codec::Reader& rd) {
  Engine::Desc d;
  d.kind = rd.u8("kind");
  d.dtype = rd.u8("dtype");
  d.op = rd.u8("op");
  d.root = rd.i32("root");
  d.count = rd.u64("count");
  return d;
}

void check_desc(const codec::Reader& rd, const Engine::Desc& d, const std::string& name) {
  if (d.kind < kAllreduce || d.kind > kLastKind || d.dtype > static_cast<uint8_t>(DataType::kUInt8) ||
      d.op > static_cast<uint8_t>(ReduceOp::kProduct))
    rd.fail("request '" + name + "' has unknown kind/dtype/op " + std::to_string(d.kind) + "/" +
            std::to_string(d.dtype) + "/" + std::to_string(d.op));
}

uint32_t read_cache_size(codec::Reader& rd, uint32_t cache_size) {
  const uint32_t got = rd.u32("cache size");
  if (got != cache_size)
    rd.fail("a response cache of " + std::to_string(got) + " entries, this rank " + std::to_string(cache_size) +
            " (the caches diverged)");
  return got;
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

NegotiationMessage decode(codec::Reader& rd, uint32_t cache_size) {
  NegotiationMessage m;
  if (rd.u32("magic") != kNegotiationMagic) rd.fail("corrupt (bad magic)");
  m.cache_size = read_cache_size(rd, cache_size);
  read_cache_bits(rd, cache_size, &m);
  const uint32_t nf = rd.count("fresh request count", kFreshEntryMinBytes);
  m.fresh.reserve(nf);
  for (uint32_t i = 0; i < nf; ++i) {
    NegotiationMessage::Fresh f;
    f.desc = read_desc(rd);
    f.name = std::string(rd.str("request name"));
    check_desc(rd, f.desc, f.name);
    m.fresh.push_back(std::move(f));
  }
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
