// libFuzzer target for the store server's input path: the real edl::StoreServer (compiled into this
// target with the sanitizers and coverage) is fed each input over a loopback connection.
//
// Input byte 0: bit 0 = authenticate first (HELLO, AUTH with the right MAC and a client id), bits
// 1..6 = chunk size of the sends. The remaining bytes go to the server as they are: before AUTH they
// meet the pre-authentication limits (4 KiB budget, 4 KiB frame limit, first frame must be AUTH),
// after it the frame limit (64 KiB here, so that "oversized" is reachable) and the command table.
// Then the client half-closes and reads until the server closes; a server that does not close
// within 10 s, or stops answering the control client (checked every 64 inputs), is a finding, as
// is any crash or sanitizer report. The server is replaced every 20,000 inputs to bound its data.
// Run: ./store_server_fuzz -max_len=8192 -runs=1000000 corpus/
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "common/logging.h"
#include "edl/store_server.h"
#include "elastic/store/tcp_store_auth.h"
#include "elastic/store/tcp_store_frame.h"

namespace {

namespace st = edl::store;
const char* kSecret = "fuzz-secret";
std::unique_ptr<edl::StoreServer> g_server;
uint64_t g_inputs = 0;

void start_server() {
  g_server.reset();
  edl::StoreServerOptions o;
  o.secret = kSecret;
  o.max_frame_bytes = 64 << 10;
  g_server = std::make_unique<edl::StoreServer>(o);
}

int dial() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(g_server->port()));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) std::abort();
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// Reads one frame within 10 s (nullopt when the server closed the connection).
std::optional<st::Message> read_message(int fd, st::FrameReader* reader) {
  std::string body;
  char buf[4096];
  while (!reader->next(&body)) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 10000) != 1) {
      std::fprintf(stderr, "store server did not answer within 10 s\n");
      std::abort();
    }
    ssize_t r = recv(fd, buf, sizeof(buf), 0);
    if (r <= 0) return std::nullopt;
    if (!reader->feed(buf, static_cast<size_t>(r))) std::abort();  // the server sent a bad frame
  }
  auto m = st::decode_message(body, nullptr);
  if (!m) std::abort();
  return m;
}

// HELLO, then AUTH with the right MAC. Returns false if the server hung up.
bool authenticate(int fd, st::FrameReader* reader, const std::string& client_id) {
  auto hello = read_message(fd, reader);
  if (!hello || hello->op != st::Op::kHello || !hello->opt) std::abort();
  st::Message auth;
  auth.op = st::Op::kAuth;
  auth.key = client_id;
  auth.value = st::auth_mac(kSecret, *hello->opt);
  std::string f = st::encode_frame(auth);
  if (send(fd, f.data(), f.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(f.size())) return false;
  auto ok = read_message(fd, reader);
  return ok && ok->op == st::Op::kAuthOk;
}

void drain_until_closed(int fd) {
  char buf[65536];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 10000) != 1) {
      std::fprintf(stderr, "store server did not close a half-closed connection within 10 s\n");
      std::abort();
    }
    if (recv(fd, buf, sizeof(buf), 0) <= 0) return;
  }
}

// A fresh authenticated client must still get answers.
void check_alive() {
  int fd = dial();
  st::FrameReader reader;
  if (!authenticate(fd, &reader, "control")) std::abort();
  st::Message get;
  get.op = st::Op::kGet;
  get.id = 7;
  get.key = "k";
  std::string f = st::encode_frame(get);
  if (send(fd, f.data(), f.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(f.size())) std::abort();
  auto r = read_message(fd, &reader);
  if (!r || r->op != st::Op::kResponse || r->id != 7) std::abort();
  close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  edl::log::set_level(0);  // the server logs every rejected connection at level 1
  start_server();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (++g_inputs % 20000 == 0) start_server();
  const bool auth = data[0] & 1;
  const size_t chunk = 1 + ((data[0] >> 1) & 63) * 64;
  int fd = dial();
  st::FrameReader reader(size_t(1) << 20);
  bool open = !auth || authenticate(fd, &reader, "fuzz-client");
  for (size_t off = 1; open && off < size; off += chunk) {
    size_t n = std::min(chunk, size - off);
    open = send(fd, data + off, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n);
  }
  shutdown(fd, SHUT_WR);
  drain_until_closed(fd);
  close(fd);
  if (g_inputs % 64 == 0) check_alive();
  return 0;
}
