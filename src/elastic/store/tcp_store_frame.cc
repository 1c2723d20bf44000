#include "elastic/store/tcp_store_frame.h"

#include "common/codec.h"

namespace edl::store {
namespace {

// The fewest bytes a list entry takes (an empty str).
constexpr size_t kMinListEntryBytes = 4;

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
  codec::Writer<std::string> w(out);
  w.u32(0);  // the body length, patched below
  w.u8(static_cast<uint8_t>(m.op));
  w.u64(m.id);
  w.u8(static_cast<uint8_t>(m.status));
  w.u8(m.opt ? 1 : 0);
  w.str(m.key, "key");
  w.str(m.opt ? *m.opt : std::string(), "opt");
  w.str(m.value, "value");
  w.i64(m.number);
  w.u32(static_cast<uint32_t>(m.list.size()));
  for (const auto& s : m.list) w.str(s, "list entry");
  w.patch_u32(0, static_cast<uint32_t>(out.size() - 4));
  return out;
}

namespace {

Message decode_fields(codec::Reader& r) {
  Message m;
  const uint8_t op = r.u8("op");
  if (!is_known_op(op)) r.fail("unknown op code " + std::to_string(op));
  m.op = static_cast<Op>(op);
  r.set_kind(std::string("store ") + op_name(m.op) + " frame");
  m.id = r.u64("id");
  const uint8_t status = r.u8("status");
  const uint8_t flags = r.u8("flags");
  if (status > static_cast<uint8_t>(Status::kError)) r.fail("unknown status " + std::to_string(status));
  if (flags > 1) r.fail("unknown flags " + std::to_string(flags));
  m.status = static_cast<Status>(status);
  m.key = std::string(r.str("key"));
  std::string_view opt = r.str("opt");
  m.value = std::string(r.str("value"));
  if (flags & 1) {
    m.opt = std::string(opt);
  } else if (!opt.empty()) {
    r.fail("absent optional field carries bytes");
  }
  m.number = r.i64("number");
  const uint32_t n = r.count("list count", kMinListEntryBytes);
  m.list.reserve(n);
  for (uint32_t i = 0; i < n; ++i) m.list.emplace_back(r.str("list entry"));
  r.finish();
  return m;
}

}  // namespace

std::optional<Message> decode_message(std::string_view body, std::string* error) {
  codec::Reader r(body, "store frame");
  try {
    return decode_fields(r);
  } catch (const codec::DecodeError& e) {
    if (error) *error = e.what();
    return std::nullopt;
  }
}

bool FrameReader::check_header() {
  if (pending_bytes() < 4) return true;
  uint32_t n = codec::load_le<uint32_t>(buf_.data() + off_);
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
  uint32_t n = codec::load_le<uint32_t>(buf_.data() + off_);
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
