// The embedded TCP store: authentication, hostile input, shutdown, URL parsing.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "edl/error.h"
#include "edl/store.h"
#include "edl/store_server.h"
#include "elastic/store/tcp_store_auth.h"
#include "elastic/store/tcp_store_frame.h"

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace st = edl::store;

namespace {

std::shared_ptr<edl::Store> client(const edl::StoreServer& server, const std::string& secret) {
  edl::StoreOptions o;
  o.secret = secret;
  o.connect_timeout = 3000ms;
  o.request_timeout = 3000ms;
  return edl::connect_store(server.url(), o);
}

// A raw socket to the server for sending hostile bytes.
class RawConn {
 public:
  explicit RawConn(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(port));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0);
  }
  ~RawConn() { close(fd_); }
  void send_bytes(const std::string& b) { ::send(fd_, b.data(), b.size(), MSG_NOSIGNAL); }
  // Reads one frame (e.g. HELLO) with a deadline.
  std::optional<st::Message> read_message(int timeout_ms = 3000) {
    std::string body;
    char buf[4096];
    auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (!reader_.next(&body)) {
      pollfd p{fd_, POLLIN, 0};
      int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
      if (left <= 0 || poll(&p, 1, left) != 1) return std::nullopt;
      ssize_t r = recv(fd_, buf, sizeof(buf), 0);
      if (r <= 0) return std::nullopt;
      reader_.feed(buf, static_cast<size_t>(r));
    }
    return st::decode_message(body, nullptr);
  }
  // True when the server closes the connection within the timeout (all pending bytes are drained).
  bool closed_by_server(int timeout_ms = 3000) {
    char buf[4096];
    auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      pollfd p{fd_, POLLIN, 0};
      int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
      if (left <= 0 || poll(&p, 1, left) != 1) return false;
      ssize_t r = recv(fd_, buf, sizeof(buf), 0);
      if (r <= 0) return true;
    }
  }
  // Reads HELLO and authenticates with `secret`.
  void authenticate(const std::string& secret) {
    auto hello = read_message();
    REQUIRE(hello);
    REQUIRE(hello->op == st::Op::kHello);
    st::Message auth;
    auth.op = st::Op::kAuth;
    auth.value = st::auth_mac(secret, *hello->opt);
    send_bytes(st::encode_frame(auth));
    auto ok = read_message();
    REQUIRE(ok);
    REQUIRE(ok->op == st::Op::kAuthOk);
  }

 private:
  int fd_ = -1;
  st::FrameReader reader_;
};

std::string le32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = char(v >> (8 * i));
  return s;
}

}  // namespace

TEST_CASE("tcp store: frame codec round-trips and rejects malformed input", "[store][frame]") {
  st::Message m;
  m.op = st::Op::kCompareSet;
  m.id = 0x0102030405060708ull;
  m.key = "gen";
  m.opt = std::string("a\0b", 3);
  m.value = "desired";
  m.number = -42;
  m.list = {"x", "", "zz"};
  std::string frame = st::encode_frame(m) + st::encode_frame(m);
  st::FrameReader r;
  for (char c : frame) REQUIRE(r.feed(&c, 1));  // byte by byte
  for (int i = 0; i < 2; ++i) {
    std::string body;
    REQUIRE(r.next(&body));
    auto d = st::decode_message(body, nullptr);
    REQUIRE(d);
    CHECK(d->op == m.op);
    CHECK(d->id == m.id);
    CHECK(d->key == m.key);
    CHECK(d->opt == m.opt);
    CHECK(d->value == m.value);
    CHECK(d->number == m.number);
    CHECK(d->list == m.list);
  }
  std::string body;
  CHECK_FALSE(r.next(&body));
  CHECK(r.pending_bytes() == 0);

  // Every strict prefix of a body is rejected, as is trailing garbage and an unknown op.
  std::string good = frame.substr(4, frame.size() / 2 - 4);
  for (size_t n = 0; n < good.size(); ++n) CHECK_FALSE(st::decode_message(good.substr(0, n), nullptr));
  std::string err;
  CHECK_FALSE(st::decode_message(good + "x", &err));
  CHECK(err.find("trailing") != std::string::npos);
  std::string bad_op = good;
  bad_op[0] = char(77);
  CHECK_FALSE(st::decode_message(bad_op, &err));
  // A list count larger than the frame could hold is rejected before allocating.
  st::Message big;
  big.op = st::Op::kWait;
  std::string b = st::encode_frame(big).substr(4);
  b.replace(b.size() - 4, 4, le32(0xFFFFFFFFu));
  CHECK_FALSE(st::decode_message(b, &err));

  st::FrameReader zero;
  CHECK_FALSE(zero.feed(le32(0).data(), 4));
  st::FrameReader huge(1024);
  CHECK_FALSE(huge.feed(le32(1025).data(), 4));
  CHECK(huge.error().find("exceeds") != std::string::npos);
}

TEST_CASE("tcp store: a wrong or missing secret is rejected with AuthError", "[store][auth]") {
  edl::StoreServer server({"127.0.0.1", 0, "right"});
  CHECK(client(server, "right")->add("n", 1) == 1);
  try {
    client(server, "wrong");
    FAIL("a wrong secret was accepted");
  } catch (const edl::AuthError& e) {
    CHECK(std::string(e.what()).find("job secret") != std::string::npos);
    CHECK(std::string(e.what()).find(server.url()) != std::string::npos);
  }
  CHECK_THROWS_AS(client(server, ""), edl::AuthError);
  CHECK(server.rejected_auth_count() == 2);
  // The server keeps serving authenticated clients.
  CHECK(client(server, "right")->add("n", 1) == 2);
}

TEST_CASE("tcp store: a request before AUTH is rejected", "[store][auth]") {
  edl::StoreServer server({"127.0.0.1", 0, "k"});
  RawConn raw(server.port());
  REQUIRE(raw.read_message());  // HELLO
  st::Message set;
  set.op = st::Op::kSet;
  set.key = "injected";
  set.value = "x";
  raw.send_bytes(st::encode_frame(set));
  auto reply = raw.read_message();
  REQUIRE(reply);
  CHECK(reply->op == st::Op::kAuthFail);
  CHECK(raw.closed_by_server());
  CHECK_FALSE(client(server, "k")->get("injected").has_value());
}

TEST_CASE("tcp store: garbage, oversized and truncated frames close only that connection", "[store][hostile]") {
  edl::StoreServer server({"127.0.0.1", 0, "k"});
  auto good = client(server, "k");
  good->set("survives", "yes");

  SECTION("HTTP request instead of frames (length prefix 'GET ' is ~542 MB)") {
    RawConn raw(server.port());
    raw.send_bytes("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(raw.closed_by_server());
  }
  SECTION("huge length prefix after authenticating") {
    RawConn raw(server.port());
    raw.authenticate("k");
    raw.send_bytes(le32(0xFFFFFFFFu) + "abc");
    CHECK(raw.closed_by_server());
  }
  SECTION("zero length prefix") {
    RawConn raw(server.port());
    raw.send_bytes(le32(0));
    CHECK(raw.closed_by_server());
  }
  SECTION("valid length, garbage body") {
    RawConn raw(server.port());
    raw.authenticate("k");
    raw.send_bytes(le32(16) + std::string(16, '\xAB'));
    CHECK(raw.closed_by_server());
  }
  SECTION("truncated frame then the peer goes away") {
    {
      RawConn raw(server.port());
      raw.authenticate("k");
      st::Message m;
      m.op = st::Op::kSet;
      m.key = "half";
      m.value = std::string(1000, 'v');
      std::string f = st::encode_frame(m);
      raw.send_bytes(f.substr(0, f.size() / 2));
    }
    std::this_thread::sleep_for(50ms);
    CHECK_FALSE(good->get("half").has_value());
  }
  // The hostile connection is gone and the good one still works.
  CHECK(good->get("survives") == std::optional<std::string>("yes"));
  good->set("after", "1");
  CHECK(client(server, "k")->get("after") == std::optional<std::string>("1"));
  auto deadline = Clock::now() + 3s;
  while (server.connection_count() > 2 && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  CHECK(server.connection_count() <= 2);
}

TEST_CASE("tcp store: server stop fails pending and later calls with StoreError", "[store]") {
  auto server = std::make_unique<edl::StoreServer>(edl::StoreServerOptions{"127.0.0.1", 0, "k"});
  edl::StoreOptions so;
  so.secret = "k";
  so.reconnect_timeout = 0ms;  // no reconnect: the loss itself is the error
  auto s = edl::connect_store(server->url(), so);
  std::string url = server->url();
  std::atomic<bool> threw{false};
  std::thread waiter([&] {
    try {
      s->wait({"never"}, 60s);
    } catch (const edl::StoreError& e) {
      threw = std::string(e.what()).find(url) != std::string::npos;
    }
  });
  std::this_thread::sleep_for(50ms);
  auto t0 = Clock::now();
  server->stop();
  waiter.join();
  CHECK(threw.load());
  CHECK(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count() < 2000);
  CHECK_THROWS_AS(s->get("x"), edl::StoreError);
  CHECK_THROWS_AS(s->get_many({"x", "y", "z"}), edl::StoreError);
  server.reset();
  // Nobody listens any more: connecting fails with StoreError naming the address.
  edl::StoreOptions o;
  o.connect_timeout = 200ms;
  try {
    edl::connect_store(url, o);
    FAIL("connected to a stopped server");
  } catch (const edl::StoreError& e) {
    CHECK(std::string(e.what()).find(url) != std::string::npos);
  }
}

TEST_CASE("tcp store: many clients and waiters", "[store]") {
  edl::StoreServer server({"127.0.0.1", 0, ""});
  std::vector<std::shared_ptr<edl::Store>> clients;
  for (int i = 0; i < 16; ++i) clients.push_back(client(server, ""));
  std::vector<std::thread> ts;
  std::atomic<int> woke{0};
  for (int i = 0; i < 16; ++i)
    ts.emplace_back([&, i] {
      if (clients[i]->wait({"go"}, 10s)) ++woke;
    });
  std::this_thread::sleep_for(50ms);
  clients[0]->set("go", "1");
  for (auto& t : ts) t.join();
  CHECK(woke.load() == 16);
}

TEST_CASE("connect_store: URLs", "[store]") {
  CHECK_THROWS_AS(edl::connect_store("localhost:1234"), edl::InvalidArgument);
  CHECK_THROWS_AS(edl::connect_store("tcp://localhost"), edl::InvalidArgument);
  CHECK_THROWS_AS(edl::connect_store("tcp://:80"), edl::InvalidArgument);
  CHECK_THROWS_AS(edl::connect_store("tcp://host:99999"), edl::InvalidArgument);
  CHECK_THROWS_AS(edl::connect_store("tcp://host:http"), edl::InvalidArgument);
  CHECK_THROWS_AS(edl::connect_store("zk://host:2379"), edl::InvalidArgument);  // etcd:// is a backend now
  CHECK_THROWS_AS(edl::connect_store("memory://"), edl::InvalidArgument);
  try {
    edl::connect_store("ftp://x:1");
  } catch (const edl::InvalidArgument& e) {
    CHECK(std::string(e.what()).find("ftp://x:1") != std::string::npos);
  }
  auto a = edl::connect_store("memory://shared-name");
  auto b = edl::connect_store("memory://shared-name");
  auto c = edl::connect_store("memory://other-name");
  a->set("k", "v");
  CHECK(b->get("k") == std::optional<std::string>("v"));
  CHECK_FALSE(c->get("k").has_value());
}

TEST_CASE("tcp store: a connection that never authenticates is closed after the handshake timeout",
          "[store][hostile]") {
  edl::StoreServerOptions o{"127.0.0.1", 0, "k"};
  o.handshake_timeout = std::chrono::milliseconds(200);
  edl::StoreServer server(o);
  RawConn raw(server.port());
  REQUIRE(raw.read_message());  // HELLO, then silence
  auto t0 = Clock::now();
  CHECK(raw.closed_by_server(5000));
  CHECK(Clock::now() - t0 < 3s);
  CHECK(server.rejected_auth_count() == 1);
  // An authenticated client is not subject to the timeout.
  auto c = client(server, "k");
  std::this_thread::sleep_for(400ms);
  c->set("still", "here");
  CHECK(c->get("still") == std::optional<std::string>("here"));
}

TEST_CASE("tcp store: a client that does not read its replies is throttled, others are served",
          "[store][hostile]") {
  edl::StoreServerOptions o{"127.0.0.1", 0, "k"};
  o.max_pending_output_bytes = size_t(2) << 20;
  edl::StoreServer server(o);
  auto good = client(server, "k");
  std::string big(size_t(1) << 20, 'b');
  good->set("big", big);
  constexpr int kRequests = 48;  // 48 MiB of replies
  RawConn raw(server.port());
  raw.authenticate("k");
  std::string burst;
  for (int i = 0; i < kRequests; ++i) {
    st::Message get;
    get.op = st::Op::kGet;
    get.id = static_cast<uint64_t>(100 + i);
    get.key = "big";
    burst += st::encode_frame(get);
  }
  raw.send_bytes(burst);
  auto deadline = Clock::now() + 5s;
  while (server.throttle_count() == 0 && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  CHECK(server.throttle_count() >= 1);
  // The stalled reader does not stall the server.
  auto t0 = Clock::now();
  good->set("k2", "v2");
  CHECK(good->get("k2") == std::optional<std::string>("v2"));
  CHECK(Clock::now() - t0 < 2s);
  // Once it reads, every reply arrives, complete and in order.
  for (int i = 0; i < kRequests; ++i) {
    auto r = raw.read_message(10000);
    REQUIRE(r);
    CHECK(r->id == static_cast<uint64_t>(100 + i));
    CHECK((r->opt && r->opt->size() == big.size()));
  }
}

TEST_CASE("tcp store: a value above the frame limit is refused on the client", "[store]") {
  edl::StoreServer server({"127.0.0.1", 0, "k"});
  auto c = client(server, "k");
  std::string huge((size_t(64) << 20) + 1, 'h');
  CHECK_THROWS_AS(c->set("huge", huge), edl::InvalidArgument);
  c->set("small", "ok");  // the connection is still fine
  CHECK(c->get("small") == std::optional<std::string>("ok"));
  CHECK(server.bad_frame_count() == 0);
}
