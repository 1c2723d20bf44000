#include "collective/negotiation_message.h"

#include <cstring>

#include "edl/error.h"

namespace edl::collective {
namespace {

template <typename T>
void put(std::vector<uint8_t>& b, T v) {
  size_t at = b.size();
  b.resize(at + sizeof(T));
  std::memcpy(b.data() + at, &v, sizeof(T));
}

class Reader {
 public:
  Reader(const uint8_t* p, size_t n, int rank) : p_(p), n_(n), rank_(rank) {}
  template <typename T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  std::string str(size_t len, const char* what) {
    need(len, what);
    std::string s(reinterpret_cast<const char*>(p_ + at_), len);
    at_ += len;
    return s;
  }
  size_t left() const { return n_ - at_; }
  [[noreturn]] void fail(const std::string& why) const {
    throw CommError("collective engine: negotiation message of rank " + std::to_string(rank_) + " " + why);
  }

 private:
  void need(size_t k, const char* what) {
    if (n_ - at_ < k)
      fail("is truncated (" + std::string(what) + " at byte " + std::to_string(at_) + " of " + std::to_string(n_) +
           ")");
  }
  const uint8_t* p_;
  size_t n_;
  size_t at_ = 0;
  int rank_;
};

}  // namespace

std::vector<uint8_t> encode_negotiation(uint32_t cache_size, const std::vector<uint64_t>& bits,
                                        const std::vector<NegotiationMessage::Fresh>& fresh) {
  std::vector<uint8_t> msg;
  put<uint32_t>(msg, kNegotiationMagic);
  put<uint32_t>(msg, cache_size);
  for (uint64_t w : bits) put<uint64_t>(msg, w);
  put<uint32_t>(msg, static_cast<uint32_t>(fresh.size()));
  for (const auto& f : fresh) {
    put<uint8_t>(msg, f.desc.kind);
    put<uint8_t>(msg, f.desc.dtype);
    put<uint8_t>(msg, f.desc.op);
    put<int32_t>(msg, f.desc.root);
    put<uint64_t>(msg, f.desc.count);
    put<uint32_t>(msg, static_cast<uint32_t>(f.name.size()));
    msg.insert(msg.end(), f.name.begin(), f.name.end());
  }
  return msg;
}

NegotiationMessage decode_negotiation(const uint8_t* p, size_t n, uint32_t cache_size, int sender) {
  Reader rd(p, n, sender);
  NegotiationMessage m;
  if (rd.get<uint32_t>("magic") != kNegotiationMagic) rd.fail("is corrupt (bad magic)");
  m.cache_size = rd.get<uint32_t>("cache size");
  if (m.cache_size != cache_size)
    rd.fail("has a response cache of " + std::to_string(m.cache_size) + " entries, this rank " +
            std::to_string(cache_size) + " (the caches diverged)");
  const size_t words = (static_cast<size_t>(cache_size) + 63) / 64;
  for (size_t w = 0; w < words; ++w) {
    uint64_t word = rd.get<uint64_t>("cache bitset");
    while (word) {
      const size_t id = w * 64 + static_cast<size_t>(__builtin_ctzll(word));
      word &= word - 1;
      if (id >= cache_size) rd.fail("sets cache bit " + std::to_string(id) + " beyond the cache");
      m.cached.push_back(static_cast<uint32_t>(id));
    }
  }
  const uint32_t nf = rd.get<uint32_t>("fresh count");
  if (nf > rd.left() / kFreshEntryMinBytes)
    rd.fail("lists " + std::to_string(nf) + " new requests in " + std::to_string(rd.left()) + " bytes");
  m.fresh.reserve(nf);
  for (uint32_t i = 0; i < nf; ++i) {
    NegotiationMessage::Fresh f;
    f.desc.kind = rd.get<uint8_t>("kind");
    f.desc.dtype = rd.get<uint8_t>("dtype");
    f.desc.op = rd.get<uint8_t>("op");
    f.desc.root = rd.get<int32_t>("root");
    f.desc.count = rd.get<uint64_t>("count");
    const uint32_t len = rd.get<uint32_t>("name length");
    if (len > rd.left())
      rd.fail("announces a request name of " + std::to_string(len) + " bytes with " + std::to_string(rd.left()) +
              " left");
    f.name = rd.str(len, "name");
    if (f.desc.kind < kAllreduce || f.desc.kind > kBarrier || f.desc.dtype > static_cast<uint8_t>(DataType::kUInt8) ||
        f.desc.op > static_cast<uint8_t>(ReduceOp::kProduct))
      rd.fail("describes '" + f.name + "' with unknown kind/dtype/op " + std::to_string(f.desc.kind) + "/" +
              std::to_string(f.desc.dtype) + "/" + std::to_string(f.desc.op));
    m.fresh.push_back(std::move(f));
  }
  if (rd.left() != 0) rd.fail("has " + std::to_string(rd.left()) + " trailing bytes");
  return m;
}

}  // namespace edl::collective
