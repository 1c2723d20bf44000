// src/common/crypto: libcrypto-backed SHA-256 / HMAC-SHA256 against the published test vectors
// (FIPS 180-2 examples, RFC 4231), the constant-time compare and the CSPRNG.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "common/crypto.h"

namespace {

std::string hex(const edl::crypto::Digest& d) {
  static const char* k = "0123456789abcdef";
  std::string s;
  for (auto b : d) {
    s.push_back(k[b >> 4]);
    s.push_back(k[b & 15]);
  }
  return s;
}

std::string unhex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return out;
}

}  // namespace

using edl::crypto::hmac_sha256;
using edl::crypto::sha256;

TEST_CASE("crypto: SHA-256 matches the FIPS 180-2 vectors", "[crypto]") {
  CHECK(hex(sha256("")) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(hex(sha256("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(hex(sha256(std::string(1000000, 'a'))) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("crypto: HMAC-SHA256 matches RFC 4231", "[crypto]") {
  // Test case 1: 20-byte key.
  CHECK(hex(hmac_sha256(std::string(20, '\x0b'), "Hi There")) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // Test case 2: key shorter than the digest.
  CHECK(hex(hmac_sha256("Jefe", "what do ya want for nothing?")) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 3: combined length of key and data larger than 64 bytes.
  CHECK(hex(hmac_sha256(std::string(20, '\xaa'), std::string(50, '\xdd'))) ==
        "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  // Test case 4: 25-byte key 0x01..0x19.
  CHECK(hex(hmac_sha256(unhex("0102030405060708090a0b0c0d0e0f10111213141516171819"), std::string(50, '\xcd'))) ==
        "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  // Test case 6: key larger than the block size (hashed first).
  CHECK(hex(hmac_sha256(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First")) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  // Test case 7: large key and large data.
  CHECK(hex(hmac_sha256(std::string(131, '\xaa'),
                        "This is a test using a larger than block-size key and a larger than block-size data. The key "
                        "needs to be hashed before being used by the HMAC algorithm.")) ==
        "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST_CASE("crypto: an empty key is a valid HMAC key and differs from a non-empty one", "[crypto]") {
  // HMAC-SHA256("", "") from the definition: a zero key block.
  CHECK(hex(hmac_sha256("", "")) == "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
  CHECK(hmac_sha256("", "x") != hmac_sha256("k", "x"));
}

TEST_CASE("crypto: constant-time compare and random bytes", "[crypto]") {
  CHECK(edl::crypto::constant_time_equal("abc", "abc"));
  CHECK(edl::crypto::constant_time_equal("", ""));
  CHECK_FALSE(edl::crypto::constant_time_equal("abc", "abd"));
  CHECK_FALSE(edl::crypto::constant_time_equal("abc", "ab"));
  std::set<std::string> seen;
  for (int i = 0; i < 64; ++i) {
    std::string r = edl::crypto::random_bytes(32);
    REQUIRE(r.size() == 32);
    seen.insert(r);
  }
  CHECK(seen.size() == 64);  // 64 draws of 256 bits never collide
  CHECK(edl::crypto::random_bytes(0).empty());
}
