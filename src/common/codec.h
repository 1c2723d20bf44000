// The one binary codec of EDL: what the store frames (elastic/store/tcp_store_frame), the state snapshots
// and checkpoint files (elastic/snapshot, elastic/checkpoint) and the collective engine's
// negotiation messages (collective/negotiation_message) are written and read with.
//
//   integers   little-endian, fixed width (u8 u32 u64 i32 i64), on every host
//   str        u32 length + bytes
//   blob       u64 length + bytes
//   raw        bytes whose length the format fixes or carries elsewhere
//
// Writer appends to a byte buffer (std::string or std::vector<uint8_t>). Reader is a bounds-checked
// cursor over bytes it does not own: every read checks that the bytes are there, and every length
// or count read from the input is checked against the bytes actually left (and an optional maximum)
// before anything is allocated. A violation throws DecodeError (a DataError) whose message names
// the message kind, the field and the byte offset, e.g. "state snapshot 'ckpt': truncated: item
// name needs 12 bytes at byte 40, 3 left". Callers that report another error type (the engine's
// CommError, the store's error string) catch DecodeError and wrap its text.
//
// Thread-safety: a Writer or Reader is used by one thread; the free functions are pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

#include "edl/error.h"

namespace edl::codec {

// A malformed encoded message or file; the text names the message kind and the field.
class DecodeError : public DataError {
 public:
  using DataError::DataError;
};

// Little-endian load / store of an integer type at p.
template <typename T>
inline void store_le(void* p, T v) {
  static_assert(std::is_integral_v<T>, "integers only");
  using U = std::make_unsigned_t<T>;
  U u = static_cast<U>(v);
  auto* b = static_cast<unsigned char*>(p);
  for (size_t i = 0; i < sizeof(T); ++i) b[i] = static_cast<unsigned char>(u >> (8 * i));
}

template <typename T>
inline T load_le(const void* p) {
  static_assert(std::is_integral_v<T>, "integers only");
  using U = std::make_unsigned_t<T>;
  const auto* b = static_cast<const unsigned char*>(p);
  U u = 0;
  for (size_t i = 0; i < sizeof(T); ++i) u = static_cast<U>(u | (static_cast<U>(b[i]) << (8 * i)));
  return static_cast<T>(u);
}

// Appends encoded fields to `out` (std::string or std::vector<uint8_t>), which must outlive it.
template <typename Buffer>
class Writer {
 public:
  explicit Writer(Buffer& out) : out_(out) {}

  void u8(uint8_t v) { put(v); }
  void u32(uint32_t v) { put(v); }
  void u64(uint64_t v) { put(v); }
  void i32(int32_t v) { put(v); }
  void i64(int64_t v) { put(v); }
  void raw(const void* p, size_t n) {
    if constexpr (std::is_same_v<Buffer, std::string>) {
      out_.append(static_cast<const char*>(p), n);
    } else {
      const size_t at = out_.size();
      out_.resize(at + n);
      if (n > 0) std::memcpy(&out_[at], p, n);
    }
  }
  // u32 length + bytes. A string of 4 GiB or more cannot be encoded: InvalidArgument naming `field`.
  void str(std::string_view s, const char* field = "string") {
    EDL_CHECK(s.size() <= std::numeric_limits<uint32_t>::max(), InvalidArgument,
              std::string(field) + " of " + std::to_string(s.size()) + " bytes does not fit a u32 length");
    u32(static_cast<uint32_t>(s.size()));
    raw(s.data(), s.size());
  }
  // u64 length + bytes.
  void blob(std::string_view s) {
    u64(s.size());
    raw(s.data(), s.size());
  }
  // Overwrites the u32 at byte `at` (a length written before the bytes it counts were known).
  void patch_u32(size_t at, uint32_t v) {
    EDL_ASSERT(at + 4 <= out_.size());
    store_le(&out_[at], v);
  }
  size_t size() const { return out_.size(); }

 private:
  template <typename T>
  void put(T v) {
    unsigned char b[sizeof(T)];
    store_le(b, v);
    raw(b, sizeof(T));
  }
  Buffer& out_;
};

// Reads fields from bytes it does not own (they must outlive the Reader and every view it returns).
class EDL_API Reader {  // exported: libedl_cuda decodes its agreement records with it
 public:
  static constexpr size_t kNoLimit = std::numeric_limits<size_t>::max();

  // `kind` names the message in errors ("store frame", "state snapshot 'checkpoint file x'").
  Reader(const void* data, size_t n, std::string kind)
      : p_(static_cast<const char*>(data)), n_(n), kind_(std::move(kind)) {}
  Reader(std::string_view bytes, std::string kind) : Reader(bytes.data(), bytes.size(), std::move(kind)) {}

  uint8_t u8(const char* field) { return get<uint8_t>(field); }
  uint32_t u32(const char* field) { return get<uint32_t>(field); }
  uint64_t u64(const char* field) { return get<uint64_t>(field); }
  int32_t i32(const char* field) { return get<int32_t>(field); }
  int64_t i64(const char* field) { return get<int64_t>(field); }

  // The next n bytes.
  std::string_view raw(size_t n, const char* field);
  // A u32-length-prefixed string; its length is checked against the bytes left and `max`.
  std::string_view str(const char* field, size_t max = kNoLimit);
  // A u64-length-prefixed byte blob; its length is checked against the bytes left and `max`.
  std::string_view blob(const char* field, size_t max = kNoLimit);
  // A u32 count of entries that take at least `min_entry_bytes` each: refused when that many
  // entries cannot fit in the bytes left (so a caller may reserve `count` entries).
  uint32_t count(const char* field, size_t min_entry_bytes);

  size_t left() const { return n_ - at_; }
  size_t offset() const { return at_; }
  bool done() const { return at_ == n_; }
  // Throws unless every byte was read.
  void finish() const;
  const std::string& kind() const { return kind_; }
  // Names the message in later errors (e.g. once its type is decoded).
  void set_kind(std::string kind) { kind_ = std::move(kind); }
  // Throws DecodeError("<kind>: <why>").
  [[noreturn]] void fail(const std::string& why) const;

 private:
  template <typename T>
  T get(const char* field) {
    need(sizeof(T), field);
    T v = load_le<T>(p_ + at_);
    at_ += sizeof(T);
    return v;
  }
  void need(size_t k, const char* field) const {
    if (left() < k) truncated(k, field);
  }
  [[noreturn]] void truncated(size_t k, const char* field) const;
  size_t checked_length(uint64_t len, size_t max, const char* field) const;

  const char* p_;
  size_t n_;
  size_t at_ = 0;
  std::string kind_;
};

}  // namespace edl::codec
