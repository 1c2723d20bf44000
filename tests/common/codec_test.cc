// The one binary codec (src/common/codec.h): round trips, byte layout, truncated input and
// oversize lengths / counts refused before anything is allocated, with the field and message kind
// named.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "common/codec.h"

using edl::codec::DecodeError;
using edl::codec::Reader;
using edl::codec::Writer;

namespace {

std::string sample() {
  std::string out;
  Writer<std::string> w(out);
  w.u8(0xab);
  w.u32(0x01020304u);
  w.u64(0x1122334455667788ull);
  w.i32(-2);
  w.i64(-3);
  w.str("key");
  w.blob(std::string("\0payload", 8));
  w.raw("xy", 2);
  return out;
}

// The text of the DecodeError that decoding `bytes` with `read` throws ("" when none).
template <typename F>
std::string error_of(const std::string& bytes, F read) {
  Reader r(bytes, "test message");
  try {
    read(r);
  } catch (const DecodeError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("codec: every field round-trips", "[codec]") {
  const std::string bytes = sample();
  Reader r(bytes, "test message");
  CHECK(r.u8("a") == 0xab);
  CHECK(r.u32("b") == 0x01020304u);
  CHECK(r.u64("c") == 0x1122334455667788ull);
  CHECK(r.i32("d") == -2);
  CHECK(r.i64("e") == -3);
  CHECK(r.str("f") == "key");
  CHECK(r.blob("g") == std::string("\0payload", 8));
  CHECK(r.raw(2, "h") == "xy");
  CHECK(r.done());
  CHECK_NOTHROW(r.finish());
}

TEST_CASE("codec: integers are little-endian and lengths prefix the bytes", "[codec]") {
  std::vector<uint8_t> out;
  Writer<std::vector<uint8_t>> w(out);
  w.u32(0x01020304u);
  w.str("ab");
  w.i64(-1);
  const std::vector<uint8_t> want{4, 3, 2, 1, 2, 0, 0, 0, 'a', 'b', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  CHECK(out == want);
  w.patch_u32(0, 7);
  CHECK(out[0] == 7);
  CHECK(out[3] == 0);
  unsigned char b[8];
  edl::codec::store_le<uint64_t>(b, 0x0807060504030201ull);
  CHECK(b[0] == 1);
  CHECK(b[7] == 8);
  CHECK(edl::codec::load_le<uint64_t>(b) == 0x0807060504030201ull);
  CHECK(edl::codec::load_le<int32_t>(b) == 0x04030201);
}

TEST_CASE("codec: every truncation of a message is refused naming the field and the message kind", "[codec]") {
  const std::string bytes = sample();
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    INFO("cut at " << cut);
    const std::string err = error_of(bytes.substr(0, cut), [](Reader& r) {
      r.u8("a");
      r.u32("b");
      r.u64("c");
      r.i32("d");
      r.i64("e");
      r.str("f");
      r.blob("g");
      r.raw(2, "h");
      r.finish();
    });
    CHECK_THAT(err, Catch::StartsWith("test message: "));
    CHECK_THAT(err, Catch::Contains("truncated") || Catch::Contains("exceeds the"));
  }
  CHECK(error_of(bytes.substr(0, 3), [](Reader& r) {
          r.u8("a");
          r.u32("field b");
        }) == "test message: truncated: field b needs 4 bytes at byte 1, 2 left");
}

TEST_CASE("codec: oversize lengths and counts are refused before any allocation", "[codec]") {
  SECTION("a u32 string length beyond the bytes left") {
    std::string b;
    Writer<std::string> w(b);
    w.u32(0xfffffff0u);
    w.raw("abc", 3);
    CHECK_THAT(error_of(b, [](Reader& r) { r.str("name"); }),
               Catch::Contains("test message: name length 4294967280 exceeds the 3 bytes left"));
  }
  SECTION("a u64 blob length of 2^63") {
    std::string b;
    Writer<std::string> w(b);
    w.u64(uint64_t(1) << 63);
    CHECK_THAT(error_of(b, [](Reader& r) { r.blob("payload"); }),
               Catch::Contains("payload length 9223372036854775808 exceeds the 0 bytes left"));
  }
  SECTION("a length above the caller's limit, even when the bytes are there") {
    std::string b;
    Writer<std::string> w(b);
    w.str("0123456789");
    CHECK_THAT(error_of(b, [](Reader& r) { r.str("key", 4); }),
               Catch::Contains("key length 10 exceeds the limit of 4 bytes"));
    Reader ok(b, "m");
    CHECK(ok.str("key", 10) == "0123456789");
  }
  SECTION("a count whose entries cannot fit") {
    std::string b;
    Writer<std::string> w(b);
    w.u32(1000);
    w.raw("12345678", 8);
    CHECK_THAT(error_of(b, [](Reader& r) { r.count("entry count", 4); }),
               Catch::Contains("entry count 1000 cannot fit in the 8 bytes left"));
    const std::string fits = b.substr(0, 4) + std::string(4000, 'x');
    Reader ok(fits, "m");
    CHECK(ok.count("entry count", 4) == 1000);
  }
}

TEST_CASE("codec: trailing bytes, set_kind and fail name the message", "[codec]") {
  std::string b = sample() + "!";
  Reader r(b, "first kind");
  r.raw(b.size() - 1, "all");
  r.set_kind("store SET frame");
  CHECK_THROWS_WITH(r.finish(), "store SET frame: 1 trailing bytes after byte " + std::to_string(b.size() - 1));
  CHECK_THROWS_AS(r.fail("x"), edl::DataError);
}

TEST_CASE("codec: a string of 4 GiB cannot be written with a u32 length", "[codec]") {
  // A view that claims 4 GiB is never read: the writer refuses it from its size alone.
  const char c = 0;
  std::string_view huge(&c, size_t(1) << 32);
  std::string out;
  Writer<std::string> w(out);
  CHECK_THROWS_AS(w.str(huge, "key"), edl::InvalidArgument);
  CHECK(out.empty());
}
