// libFuzzer target for the store frame parser (src/elastic/store/tcp_store_frame.cc).
//
// The input is a byte stream as a client could send it. It is fed to a FrameReader in chunks whose
// sizes come from the first input byte (so frames cross read boundaries), every complete body is
// decoded, and every message that decodes must survive encode -> decode unchanged. With the top bit
// of byte 0 the reader runs under the server's limits: 4 KiB frames until an AUTH frame decodes,
// then 64 KiB (FrameReader::set_max_frame_bytes). The whole input is also decoded as one body.
// The server's own input path (pre-auth byte budget, caps, commands) is store_server_fuzz.cc. Crashes, sanitizer reports or a broken round trip are findings.
// Build: CXX=clang++ cmake -DEDL_BUILD_FUZZ=ON ... && ninja store_frame_fuzz
// Run:   ./store_frame_fuzz -max_total_time=60 -max_len=4096 corpus/
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "elastic/store/tcp_store_frame.h"

namespace {

void check_round_trip(const edl::store::Message& m) {
  std::string frame = edl::store::encode_frame(m);
  edl::store::FrameReader r(edl::store::kDefaultMaxFrameBytes);
  std::string body;
  if (!r.feed(frame.data(), frame.size()) || !r.next(&body)) std::abort();
  auto again = edl::store::decode_message(body, nullptr);
  if (!again || again->op != m.op || again->id != m.id || again->status != m.status || again->key != m.key ||
      again->opt != m.opt || again->value != m.value || again->number != m.number || again->list != m.list)
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const char* p = reinterpret_cast<const char*>(data);
  size_t chunk = 1 + data[0] % 64;
  // Top bit: the server's limits (a 4 KiB frame limit until the first AUTH frame decodes, then
  // 64 KiB, as the server raises it after authentication); otherwise the client's 64 MiB limit.
  const bool server_limits = data[0] & 0x80;
  edl::store::FrameReader reader(server_limits ? 4096 : edl::store::kDefaultMaxFrameBytes);
  bool authed = false;
  std::string body;
  for (size_t off = 1; off < size; off += chunk) {
    bool ok = reader.feed(p + off, std::min(chunk, size - off));
    while (reader.next(&body)) {
      if (server_limits && !authed && body.size() > 4096) std::abort();  // the pre-auth limit held
      std::string err;
      auto m = edl::store::decode_message(body, &err);
      if (m) {
        check_round_trip(*m);
        if (server_limits && !authed && m->op == edl::store::Op::kAuth) {
          authed = true;
          reader.set_max_frame_bytes(64 << 10);
        }
      } else if (err.empty()) {
        std::abort();  // a rejection must say why
      }
    }
    if (!ok) {
      if (reader.error().empty()) std::abort();
      break;
    }
  }
  auto whole = edl::store::decode_message(std::string_view(p, size), nullptr);
  if (whole) check_round_trip(*whole);
  return 0;
}
