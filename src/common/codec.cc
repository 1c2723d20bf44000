#include "common/codec.h"

namespace edl::codec {

std::string_view Reader::raw(size_t n, const char* field) {
  need(n, field);
  std::string_view v(p_ + at_, n);
  at_ += n;
  return v;
}

size_t Reader::checked_length(uint64_t len, size_t max, const char* field) const {
  if (len > max)
    fail(std::string(field) + " length " + std::to_string(len) + " exceeds the limit of " + std::to_string(max) +
         " bytes (at byte " + std::to_string(at_) + ")");
  if (len > left())
    fail(std::string(field) + " length " + std::to_string(len) + " exceeds the " + std::to_string(left()) +
         " bytes left (at byte " + std::to_string(at_) + " of " + std::to_string(n_) + ")");
  return static_cast<size_t>(len);
}

std::string_view Reader::str(const char* field, size_t max) {
  const size_t len = checked_length(u32(field), max, field);
  return raw(len, field);
}

std::string_view Reader::blob(const char* field, size_t max) {
  const size_t len = checked_length(u64(field), max, field);
  return raw(len, field);
}

uint32_t Reader::count(const char* field, size_t min_entry_bytes) {
  const uint32_t c = u32(field);
  if (min_entry_bytes > 0 && c > left() / min_entry_bytes)
    fail(std::string(field) + " " + std::to_string(c) + " cannot fit in the " + std::to_string(left()) +
         " bytes left (at least " + std::to_string(min_entry_bytes) + " bytes each)");
  return c;
}

void Reader::finish() const {
  if (!done()) fail(std::to_string(left()) + " trailing bytes after byte " + std::to_string(at_));
}

void Reader::fail(const std::string& why) const { throw DecodeError(kind_ + ": " + why); }

void Reader::truncated(size_t k, const char* field) const {
  fail("truncated: " + std::string(field) + " needs " + std::to_string(k) + " bytes at byte " + std::to_string(at_) +
       ", " + std::to_string(left()) + " left");
}

}  // namespace edl::codec
