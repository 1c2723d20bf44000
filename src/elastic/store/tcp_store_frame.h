// Frame codec of the embedded TCP store protocol (docs/store.md).
//
// Wire format: every frame is a little-endian u32 body length N (1 <= N <= max_frame_bytes, default
// 64 MiB) followed by N body bytes. Every body — request, response, handshake — has one layout:
//
//   u8 op | u64 id | u8 status | u8 flags | str key | str opt | str value | i64 number | u32 n | n x str
//   (str = u32 length + bytes; flags bit 0 = `opt` is present; written and read with the common
//   codec, common/codec.h)
//
// Ops are listed in Op. A request and its response carry the same id. The codec is pure (no I/O):
// FrameReader cuts a byte stream into bodies and rejects oversized / zero lengths; decode_message()
// rejects unknown ops, truncated fields, trailing bytes and absurd counts, naming the op and field. It is what the libFuzzer
// target tests/fuzz/store_frame_fuzz.cc drives.
// Thread-safety: a FrameReader is used by one thread; the free functions are pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace edl::store {

constexpr size_t kDefaultMaxFrameBytes = size_t(64) << 20;  // 64 MiB
constexpr size_t kNonceBytes = 32;
constexpr const char* kProtocolMagic = "EDL-STORE/1";

enum class Op : uint8_t {
  kHello = 1,      // server -> client: value = magic, opt = nonce
  kAuth = 2,       // client -> server: value = HMAC (first frame of every connection)
  kAuthOk = 3,     // server -> client
  kAuthFail = 4,   // server -> client: value = reason; the server closes the connection
  kSet = 16,       // key, value
  kGet = 17,       // key
  kAdd = 18,       // key, number = delta
  kCompareSet = 19,  // key, opt = expected (absent = key must be absent), value = desired
  kWait = 20,      // list = keys, number = timeout ms
  kWaitChange = 21,  // key, opt = known value (absent = key absent), number = timeout ms
  kDel = 22,       // key
  kKeys = 23,      // key = prefix
  kSetLease = 24,  // key, value, number = ttl ms
  kResponse = 128, // status, opt = value (get/cas current/wait_change), number, list; value = error text
};

enum class Status : uint8_t { kOk = 0, kFalse = 1, kInvalidArgument = 2, kError = 3 };

bool is_known_op(uint8_t op);
const char* op_name(Op op);

struct Message {
  Op op = Op::kResponse;
  uint64_t id = 0;
  Status status = Status::kOk;
  std::string key;
  std::optional<std::string> opt;
  std::string value;
  int64_t number = 0;
  std::vector<std::string> list;
};

// Encodes m as a complete frame (length prefix included).
std::string encode_frame(const Message& m);

// Decodes one frame body; nullopt (and *error set) when it is malformed.
std::optional<Message> decode_message(std::string_view body, std::string* error);

// Splits a byte stream into frame bodies.
class FrameReader {
 public:
  explicit FrameReader(size_t max_frame_bytes = kDefaultMaxFrameBytes) : max_(max_frame_bytes) {}

  // Appends bytes. Returns false once the stream is invalid (a length of 0 or above the maximum);
  // error() then names the problem and the connection must be closed.
  bool feed(const char* data, size_t n);
  // Moves the next complete body into *body; false when none is complete yet.
  bool next(std::string* body);
  const std::string& error() const { return error_; }
  // Changes the limit for frames not yet started (the server raises it from the pre-authentication
  // limit to max_frame_bytes once a connection has proved the secret).
  void set_max_frame_bytes(size_t max) { max_ = max; }
  size_t max_frame_bytes() const { return max_; }
  // Bytes of an incomplete frame still buffered (a truncated frame at EOF leaves this > 0).
  size_t pending_bytes() const { return buf_.size() - off_; }

 private:
  bool check_header();

  size_t max_;
  std::string buf_;
  size_t off_ = 0;
  bool bad_ = false;
  std::string error_;
};

}  // namespace edl::store
