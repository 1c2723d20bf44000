// Small deterministic random helpers shared by the data layer (splitmix64 based).
// The same inputs give the same outputs on every machine and after restarts.
// Thread-safety: pure functions / value types.
#pragma once

#include <cstdint>
#include <vector>

namespace edl::data::detail {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline uint64_t mix(uint64_t a, uint64_t b) { return splitmix64(a ^ splitmix64(b)); }
inline uint64_t mix(uint64_t a, uint64_t b, uint64_t c) { return mix(mix(a, b), c); }

// A tiny generator: state advanced by splitmix64.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() { return splitmix64(s_++ * 0x2545f4914f6cdd1dull); }
  // Uniform in [0, n), n > 0 (Lemire's multiply-shift; bias is negligible for the sizes used here).
  uint64_t below(uint64_t n) { return static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * n) >> 64); }

 private:
  uint64_t s_;
};

// Fisher-Yates permutation of [0, n) from a seed.
inline std::vector<uint64_t> permutation(uint64_t n, uint64_t seed) {
  std::vector<uint64_t> p(n);
  for (uint64_t i = 0; i < n; ++i) p[i] = i;
  Rng rng(seed);
  for (uint64_t i = n; i > 1; --i) {
    uint64_t j = rng.below(i);
    std::swap(p[i - 1], p[j]);
  }
  return p;
}

}  // namespace edl::data::detail
