#include "elastic/tcp_store_frame.h"

#include <cstring>

namespace edl::store {
namespace {

void put_u32(std::string& out, uint32_t v) {
  char b[4];
  for (int i = 0; i < 4; ++i) b[i] = char(v >> (8 * i));
  out.append(b, 4);
}

void put_u64(std::string& out, uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = char(v >> (8 * i));
  out.append(b, 8);
}

void put_str(std::string& out, const std::string& s) {
  put_u32(out, static_cast<uint32_t>(s.size()));
  out.append(s);
}

uint32_t read_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

// Bounds-checked cursor over a body.
class Cursor {
 public:
  explicit Cursor(std::string_view s) : s_(s) {}
  size_t left() const { return s_.size() - pos_; }
  bool u8(uint8_t* v) {
    if (left() < 1) return false;
    *v = static_cast<uint8_t>(s_[pos_++]);
    return true;
  }
  bool u32(uint32_t* v) {
    if (left() < 4) return false;
    *v = read_u32(s_.data() + pos_);
    pos_ += 4;
    return true;
  }
  bool u64(uint64_t* v) {
    if (left() < 8) return false;
    uint64_t x = 0;
    for (int i = 0; i < 8; ++i) x |= uint64_t(static_cast<unsigned char>(s_[pos_ + i])) << (8 * i);
    pos_ += 8;
    *v = x;
    return true;
  }
  bool str(std::string* v) {
    uint32_t n = 0;
    if (!u32(&n) || left() < n) return false;
    v->assign(s_.data() + pos_, n);
    pos_ += n;
    return true;
  }

 private:
  std::string_view s_;
  size_t pos_ = 0;
};

bool fail(std::string* error, const char* what) {
  if (error) *error = what;
  return false;
}

}  // namespace

bool is_known_op(uint8_t op) {
  return (op >= 1 && op <= 4) || (op >= 16 && op <= 24) || op == 128;
}

const char* op_name(Op op) {
  switch (op) {
    case Op::kHello: return "HELLO";
    case Op::kAuth: return "AUTH";
    case Op::kAuthOk: return "AUTH_OK";
    case Op::kAuthFail: return "AUTH_FAIL";
    case Op::kSet: return "SET";
    case Op::kGet: return "GET";
    case Op::kAdd: return "ADD";
    case Op::kCompareSet: return "COMPARE_SET";
    case Op::kWait: return "WAIT";
    case Op::kWaitChange: return "WAIT_CHANGE";
    case Op::kDel: return "DEL";
    case Op::kKeys: return "KEYS";
    case Op::kSetLease: return "SET_LEASE";
    case Op::kResponse: return "RESPONSE";
  }
  return "UNKNOWN";
}

std::string encode_frame(const Message& m) {
  std::string out;
  size_t size = 4 + 1 + 8 + 1 + 1 + 4 + m.key.size() + 4 + (m.opt ? m.opt->size() : 0) + 4 + m.value.size() + 8 + 4;
  for (const auto& s : m.list) size += 4 + s.size();
  out.reserve(size);
  put_u32(out, 0);  // patched below
  out.push_back(char(m.op));
  put_u64(out, m.id);
  out.push_back(char(m.status));
  out.push_back(char(m.opt ? 1 : 0));
  put_str(out, m.key);
  put_str(out, m.opt ? *m.opt : std::string());
  put_str(out, m.value);
  put_u64(out, static_cast<uint64_t>(m.number));
  put_u32(out, static_cast<uint32_t>(m.list.size()));
  for (const auto& s : m.list) put_str(out, s);
  uint32_t body = static_cast<uint32_t>(out.size() - 4);
  for (int i = 0; i < 4; ++i) out[i] = char(body >> (8 * i));
  return out;
}

std::optional<Message> decode_message(std::string_view body, std::string* error) {
  Cursor c(body);
  Message m;
  uint8_t op = 0, status = 0, flags = 0;
  if (!c.u8(&op)) return fail(error, "empty frame"), std::nullopt;
  if (!is_known_op(op)) return fail(error, "unknown op code"), std::nullopt;
  m.op = static_cast<Op>(op);
  if (!c.u64(&m.id) || !c.u8(&status) || !c.u8(&flags)) return fail(error, "truncated header"), std::nullopt;
  if (status > static_cast<uint8_t>(Status::kError)) return fail(error, "unknown status"), std::nullopt;
  if (flags > 1) return fail(error, "unknown flags"), std::nullopt;
  m.status = static_cast<Status>(status);
  std::string opt;
  if (!c.str(&m.key) || !c.str(&opt) || !c.str(&m.value)) return fail(error, "truncated string field"), std::nullopt;
  if (flags & 1) {
    m.opt = std::move(opt);
  } else if (!opt.empty()) {
    return fail(error, "absent optional field carries bytes"), std::nullopt;
  }
  uint64_t num = 0;
  uint32_t n = 0;
  if (!c.u64(&num) || !c.u32(&n)) return fail(error, "truncated number / count"), std::nullopt;
  m.number = static_cast<int64_t>(num);
  if (n > c.left() / 4) return fail(error, "list count exceeds frame size"), std::nullopt;
  m.list.resize(n);
  for (uint32_t i = 0; i < n; ++i)
    if (!c.str(&m.list[i])) return fail(error, "truncated list entry"), std::nullopt;
  if (c.left() != 0) return fail(error, "trailing bytes after message"), std::nullopt;
  return m;
}

bool FrameReader::check_header() {
  if (pending_bytes() < 4) return true;
  uint32_t n = read_u32(buf_.data() + off_);
  if (n == 0) {
    bad_ = true;
    error_ = "frame of length 0";
    return false;
  }
  if (n > max_) {
    bad_ = true;
    error_ = "frame length " + std::to_string(n) + " exceeds the limit of " + std::to_string(max_) + " bytes";
    return false;
  }
  return true;
}

bool FrameReader::feed(const char* data, size_t n) {
  if (bad_) return false;
  if (off_ > 0 && off_ >= buf_.size() / 2) {
    buf_.erase(0, off_);
    off_ = 0;
  }
  buf_.append(data, n);
  return check_header();
}

bool FrameReader::next(std::string* body) {
  if (bad_ || pending_bytes() < 4) return false;
  if (!check_header()) return false;
  uint32_t n = read_u32(buf_.data() + off_);
  if (pending_bytes() - 4 < n) return false;
  body->assign(buf_.data() + off_ + 4, n);
  off_ += 4 + size_t(n);
  if (off_ == buf_.size()) {
    buf_.clear();
    off_ = 0;
  }
  check_header();  // validate the next header early: a bad one poisons the stream from here on
  return true;
}

}  // namespace edl::store
