// Hostile input at the mesh and in the collective messages: strangers at a rank's listener (garbage,
// foreign generation, rank outside the generation, wrong job secret, silence), ranks with different
// secrets, a peer announcing a 4 GiB allgather, and absurd negotiation lists.
#include <catch2/catch.hpp>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <tuple>

#include "collective/harness.h"
#include "collective/mesh_handshake.h"
#include "collective/negotiation_message.h"
#include "collective/tcp_internal.h"

using namespace edl;
using collective::Clock;
namespace mesh = edl::collective::mesh;

namespace {

CommunicatorOptions secret_options(const std::string& secret, int connect_ms = 10000) {
  CommunicatorOptions o = test::fast_options(20000);
  o.connect_timeout = std::chrono::milliseconds(connect_ms);
  o.secret = secret;
  return o;
}

// Reads exactly n bytes (blocking, with a deadline); false on EOF, error or deadline.
bool read_exact(int fd, void* buf, size_t n, Clock::time_point deadline) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd pf{fd, POLLIN, 0};
    if (poll(&pf, 1, static_cast<int>(left)) <= 0) continue;
    ssize_t r = recv(fd, p, n, MSG_DONTWAIT);
    if (r == 0) return false;
    if (r < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return false;
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// True when the peer closes the connection (EOF) before the deadline without sending anything.
bool closed_by_peer(int fd, Clock::time_point deadline) {
  char c;
  return !read_exact(fd, &c, 1, deadline) && Clock::now() < deadline;
}

mesh::Identity identity(const std::string& prefix, uint64_t gen, int size, const std::string& secret) {
  mesh::Identity id;
  id.generation = gen;
  id.prefix_tag = collective::fnv1a(prefix);
  id.size = size;
  id.secret = secret;
  return id;
}

// A hand-driven rank: publishes an address, dials rank 0 and accepts rank 0's connection, both with
// the genuine handshake; afterwards the test writes raw collective headers on `send_fd`.
struct FakeRank {
  int lfd = -1, send_fd = -1, recv_fd = -1;
  ~FakeRank() {
    for (int fd : {lfd, send_fd, recv_fd})
      if (fd >= 0) close(fd);
  }
  void join(Store& store, const std::string& prefix, int rank, int size, const std::string& secret) {
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    const mesh::Identity id = identity(prefix, 0, size, secret);
    int port = 0;
    lfd = collective::listen_any_port("127.0.0.1", &port);
    store.set(prefix + "addr/" + std::to_string(rank), "127.0.0.1:" + std::to_string(port));
    TREQUIRE(store.wait({prefix + "addr/0"}, std::chrono::seconds(10)));
    send_fd = collective::connect_until(*store.get(prefix + "addr/0"), deadline);
    TREQUIRE(send_fd >= 0);
    mesh::ConnectSide c(id, rank, 0, std::string(32, 'f'));
    std::string hello = c.hello();
    TREQUIRE(collective::write_all(send_fd, hello.data(), hello.size(), deadline));
    uint8_t buf[mesh::kHelloBytes];
    while (c.wanted() > 0) {
      size_t n = c.wanted();
      TREQUIRE(read_exact(send_fd, buf, n, deadline));
      std::string reply = c.feed(buf, n);
      TREQUIRE(collective::write_all(send_fd, reply.data(), reply.size(), deadline));
    }
    TREQUIRE(c.state() == mesh::ConnectSide::State::kDone);
    pollfd pf{lfd, POLLIN, 0};
    TREQUIRE(poll(&pf, 1, 10000) == 1);
    recv_fd = accept(lfd, nullptr, nullptr);
    TREQUIRE(recv_fd >= 0);
    mesh::AcceptSide a(id, rank, std::string(32, 'g'));
    while (a.wanted() > 0) {
      size_t n = a.wanted();
      TREQUIRE(read_exact(recv_fd, buf, n, deadline));
      std::string reply = a.feed(buf, n);
      TREQUIRE(collective::write_all(recv_fd, reply.data(), reply.size(), deadline));
    }
    TREQUIRE(a.state() == mesh::AcceptSide::State::kDone);
  }
};

// Rank 0 as a real Communicator (built on its own thread) and rank 1 as `fake`, a world of 2 over a
// fresh memory store under a unique prefix from `name`.
std::shared_ptr<Communicator> real_rank0_with(FakeRank& fake, const std::string& name) {
  auto store = make_memory_store();
  const std::string prefix = test::unique_prefix(name);
  std::shared_ptr<Communicator> c0;
  std::exception_ptr e0;
  std::thread t([&] {
    try {
      c0 = Communicator::create(store, prefix, 0, 2, secret_options("k"));
    } catch (...) {
      e0 = std::current_exception();
    }
  });
  fake.join(*store, prefix, 1, 2, "k");
  t.join();
  if (e0) std::rethrow_exception(e0);
  return c0;
}

std::string raw_hello(uint64_t magic, const mesh::Identity& id, int rank) {
  mesh::HelloWire w{};
  w.magic = magic;
  w.generation = id.generation;
  w.prefix_tag = id.prefix_tag;
  w.rank = rank;
  w.size = id.size;
  return std::string(reinterpret_cast<const char*>(&w), sizeof(w));
}

}  // namespace

TEST_CASE("mesh handshake: genuine pairs complete, a wrong secret or a reflected MAC never does", "[collective][mesh]") {
  auto run = [](const std::string& sc, const std::string& sa, bool reflect) {
    mesh::ConnectSide c(identity("p/", 3, 2, sc), 1, 0, std::string(32, 'c'));
    mesh::AcceptSide a(identity("p/", 3, 2, sa), 0, std::string(32, 'a'));
    std::string h = c.hello();
    std::string challenge = a.feed(reinterpret_cast<const uint8_t*>(h.data()), h.size());
    REQUIRE(challenge.size() == mesh::kHelloBytes);
    REQUIRE(a.peer_rank() == 1);
    std::string proof = c.feed(reinterpret_cast<const uint8_t*>(challenge.data()), challenge.size());
    if (reflect) proof = challenge.substr(64, 32);  // the acceptor's own MAC sent back
    if (proof.empty()) return std::make_pair(a.state(), c.state());
    std::string ok = a.feed(reinterpret_cast<const uint8_t*>(proof.data()), proof.size());
    if (!ok.empty()) c.feed(reinterpret_cast<const uint8_t*>(ok.data()), ok.size());
    return std::make_pair(a.state(), c.state());
  };
  auto genuine = run("s3cret", "s3cret", false);
  CHECK(genuine.first == mesh::AcceptSide::State::kDone);
  CHECK(genuine.second == mesh::ConnectSide::State::kDone);
  auto wrong = run("s3cret", "other", false);
  CHECK(wrong.second == mesh::ConnectSide::State::kFailed);  // the acceptor could not prove the secret
  auto reflected = run("s3cret", "s3cret", true);
  CHECK(reflected.first == mesh::AcceptSide::State::kRejected);
  CHECK(run("", "", false).first == mesh::AcceptSide::State::kDone);  // no secret configured
}

TEST_CASE("mesh handshake: the acceptor learns the connector's setup word, authenticated", "[collective][mesh]") {
  auto run = [](bool tamper) {
    mesh::Identity ic = identity("p/", 3, 2, "s"), ia = ic;
    ic.setup = 0x01000102;
    ia.setup = 0x01000001;  // the acceptor's own word is not the connector's business
    mesh::ConnectSide c(ic, 1, 0, std::string(32, 'c'));
    mesh::AcceptSide a(ia, 0, std::string(32, 'a'));
    std::string h = c.hello();
    if (tamper) h[64] ^= 1;  // the setup word, changed in flight
    std::string challenge = a.feed(reinterpret_cast<const uint8_t*>(h.data()), h.size());
    std::string proof = c.feed(reinterpret_cast<const uint8_t*>(challenge.data()), challenge.size());
    if (!proof.empty()) {
      std::string ok = a.feed(reinterpret_cast<const uint8_t*>(proof.data()), proof.size());
      c.feed(reinterpret_cast<const uint8_t*>(ok.data()), ok.size());
    }
    return std::make_tuple(a.state(), c.state(), a.peer_setup());
  };
  auto [a, c, setup] = run(false);
  CHECK(a == mesh::AcceptSide::State::kDone);
  CHECK(c == mesh::ConnectSide::State::kDone);
  CHECK(setup == 0x01000102u);
  auto [ta, tc, tsetup] = run(true);  // the acceptor's MAC covers the word it received: no match
  CHECK(tc == mesh::ConnectSide::State::kFailed);
  CHECK(ta != mesh::AcceptSide::State::kDone);
  CHECK(tsetup == 0x01000103u);
}

TEST_CASE("mesh: strangers at a rank's listener are refused while the genuine mesh builds", "[collective][mesh]") {
  auto store = make_memory_store();
  const std::string prefix = test::unique_prefix("strangers");
  const std::string secret = "job-s3cret";
  const int n = 3;
  std::vector<std::shared_ptr<Communicator>> comms(n);
  std::vector<std::exception_ptr> errors(n);
  auto start = [&](int r) {
    return std::thread([&, r] {
      try {
        comms[r] = Communicator::create(store, prefix, r, n, secret_options(secret));
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  };
  std::thread t0 = start(0);
  REQUIRE(store->wait({prefix + "addr/0"}, std::chrono::seconds(10)));
  const std::string addr = *store->get(prefix + "addr/0");
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  const mesh::Identity id = identity(prefix, 0, n, secret);
  auto dial = [&] {
    int fd = collective::connect_until(addr, deadline);
    REQUIRE(fd >= 0);
    return fd;
  };
  // 1) garbage, 2) another generation, 3) a rank outside the generation, 4) this rank's own rank,
  // 5) silence, 6) half a hello then hang-up.
  int garbage = dial();
  const char http[40] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  REQUIRE(collective::write_all(garbage, http, sizeof(http), deadline));
  int other_gen = dial();
  std::string h77 = raw_hello(mesh::kHelloMagic, identity(prefix, 77, n, secret), 1);
  REQUIRE(collective::write_all(other_gen, h77.data(), h77.size(), deadline));
  int outside = dial();
  std::string h5 = raw_hello(mesh::kHelloMagic, id, 5);
  REQUIRE(collective::write_all(outside, h5.data(), h5.size(), deadline));
  int self = dial();
  std::string h0 = raw_hello(mesh::kHelloMagic, id, 0);
  REQUIRE(collective::write_all(self, h0.data(), h0.size(), deadline));
  int silent = dial();
  int partial = dial();
  REQUIRE(collective::write_all(partial, h5.data(), 7, deadline));
  close(partial);
  // 7) a well-formed hello claiming rank 1, then a proof made with the wrong secret.
  int wrong_secret = dial();
  std::string h1 = raw_hello(mesh::kHelloMagic, id, 1);
  REQUIRE(collective::write_all(wrong_secret, h1.data(), h1.size(), deadline));
  uint8_t challenge[mesh::kHelloBytes];
  REQUIRE(read_exact(wrong_secret, challenge, sizeof(challenge), deadline));
  mesh::HelloWire cw;
  std::memcpy(&cw, challenge, sizeof(cw));
  std::string forged = mesh::transcript_mac(identity(prefix, 0, n, "guess"), 'C', 1, 0, 0, std::string(32, '\0'),
                                            std::string(reinterpret_cast<const char*>(cw.nonce), 32));
  REQUIRE(collective::write_all(wrong_secret, forged.data(), forged.size(), deadline));
  // 8) a claimant of rank 2 that stops after the hello (holds the slot without proving anything).
  int stalled = dial();
  std::string h2 = raw_hello(mesh::kHelloMagic, id, 2);
  REQUIRE(collective::write_all(stalled, h2.data(), h2.size(), deadline));

  // Refused connections are closed by rank 0; the wrong proof gets a Reject (not an acceptance) first.
  uint64_t verdict = 0;
  CHECK(read_exact(wrong_secret, &verdict, sizeof(verdict), deadline));
  CHECK(verdict == mesh::kRejectMagic);
  for (int fd : {garbage, other_gen, outside, self, wrong_secret}) CHECK(closed_by_peer(fd, deadline));

  std::thread t1 = start(1), t2 = start(2);
  t0.join();
  t1.join();
  t2.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  for (int fd : {garbage, other_gen, outside, self, silent, wrong_secret, stalled}) close(fd);
  std::vector<double> got(n);
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      double v = r + 1;
      comms[r]->allreduce(&v, 1, DataType::kFloat64, ReduceOp::kSum);
      got[r] = v;
    });
  for (auto& t : ts) t.join();
  for (double v : got) CHECK(v == 6);
}

TEST_CASE("mesh: a peer that closes after our proof is lost (PeerLostError), only an explicit Reject is an AuthError",
          "[collective][mesh]") {
  for (bool reject : {false, true}) {
    INFO((reject ? "the fake acceptor sends a Reject" : "the fake acceptor closes (it died)"));
    auto store = make_memory_store();
    const std::string prefix = test::unique_prefix("closing");
    std::string got;
    std::thread t([&] {
      try {
        Communicator::create(store, prefix, 0, 2, secret_options("k", 5000));
        got = "connected";
      } catch (const AuthError& e) {
        got = std::string("AuthError: ") + e.what();
      } catch (const PeerLostError& e) {
        got = std::string("PeerLostError: ") + e.what();
      } catch (const std::exception& e) {
        got = std::string("other: ") + e.what();
      }
    });
    // Rank 1 by hand: accepts rank 0's connection, answers its hello with a genuine challenge, reads
    // its (correct) proof, then closes, with or without a Reject first.
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    int port = 0;
    int lfd = collective::listen_any_port("127.0.0.1", &port);
    store->set(prefix + "addr/1", "127.0.0.1:" + std::to_string(port));
    pollfd pf{lfd, POLLIN, 0};
    REQUIRE(poll(&pf, 1, 10000) == 1);
    int fd = accept(lfd, nullptr, nullptr);
    REQUIRE(fd >= 0);
    mesh::AcceptSide a(identity(prefix, 0, 2, "k"), 1, std::string(32, 'z'));
    uint8_t buf[mesh::kHelloBytes];
    REQUIRE(read_exact(fd, buf, mesh::kHelloBytes, deadline));
    std::string challenge = a.feed(buf, mesh::kHelloBytes);
    REQUIRE(collective::write_all(fd, challenge.data(), challenge.size(), deadline));
    REQUIRE(read_exact(fd, buf, mesh::kProofBytes, deadline));
    if (reject) {
      const uint64_t no = mesh::kRejectMagic;
      REQUIRE(collective::write_all(fd, &no, sizeof(no), deadline));
    }
    close(fd);
    close(lfd);
    t.join();
    INFO(got);
    if (reject) {
      CHECK(got.rfind("AuthError: ", 0) == 0);
      CHECK(got.find("rejected our proof") != std::string::npos);
    } else {
      CHECK(got.rfind("PeerLostError: ", 0) == 0);
      CHECK(got.find("closed the connection during the handshake") != std::string::npos);
    }
  }
}

TEST_CASE("mesh: ranks with different job secrets refuse each other with AuthError naming the address",
          "[collective][mesh]") {
  auto store = make_memory_store();
  const std::string prefix = test::unique_prefix("secrets");
  std::vector<std::string> what(2);
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; ++r)
    ts.emplace_back([&, r] {
      try {
        Communicator::create(store, prefix, r, 2, secret_options(r == 0 ? "alpha" : "beta", 5000));
        what[r] = "connected";
      } catch (const AuthError& e) {
        what[r] = std::string("AuthError: ") + e.what();
      } catch (const PeerLostError& e) {
        what[r] = std::string("PeerLostError: ") + e.what();
      } catch (const std::exception& e) {
        what[r] = std::string("other: ") + e.what();
      }
    });
  for (auto& t : ts) t.join();
  // The rank that first verifies the other's MAC fails with AuthError. The other one usually does
  // too; it may instead see the connection closed before its own check (PeerLostError).
  int auth = 0;
  for (int r = 0; r < 2; ++r) {
    INFO(what[r]);
    CHECK(what[r].find("127.0.0.1:") != std::string::npos);
    if (what[r].rfind("AuthError: ", 0) == 0) {
      ++auth;
      CHECK(what[r].find("job secret") != std::string::npos);
    } else {
      CHECK(what[r].rfind("PeerLostError: ", 0) == 0);
    }
  }
  CHECK(auth >= 1);
}

TEST_CASE("allgather: a peer announcing a 4 GiB contribution fails with CommError before allocating",
          "[collective][mesh]") {
  FakeRank fake;
  std::shared_ptr<Communicator> c0 = real_rank0_with(fake, "huge");
  using Header = collective::TcpCommunicator::Header;
  const uint64_t four_gib = uint64_t{1} << 32;
  Header h{collective::kHeaderMagic, static_cast<uint8_t>(collective::Kind::kAllgather),
           static_cast<uint8_t>(DataType::kUInt8), 0, 0, -1, 1, four_gib, 1, four_gib, 0};
  REQUIRE(collective::write_all(fake.send_fd, &h, sizeof(h), Clock::now() + std::chrono::seconds(5)));
  std::vector<uint8_t> out;
  const char mine[5] = "abcd";
  std::string msg;
  try {
    c0->allgatherv(mine, 5, DataType::kUInt8, out);
  } catch (const TimeoutError& e) {
    msg = std::string("timeout: ") + e.what();
  } catch (const CommError& e) {
    msg = e.what();
  }
  INFO(msg);
  CHECK(msg.find("rank 1") != std::string::npos);
  CHECK(msg.find("max_gather_bytes") != std::string::npos);
  CHECK(msg.find("4294967296") != std::string::npos);
  CHECK(out.capacity() == 0);  // nothing was allocated for it
  CHECK(c0->aborted());        // the stream cannot be trusted any more
}

TEST_CASE("allgather: a contribution above max_gather_bytes fails on every rank, naming the rank",
          "[collective][mesh]") {
  CommunicatorOptions o = test::fast_options();
  o.max_gather_bytes = 1000;
  std::vector<std::string> msgs(3);
  test::run_ranks(3, [&](int rank, collective::TcpCommunicator& comm) {
    std::vector<uint8_t> in(rank == 1 ? 2000 : 10, 7), out;
    try {
      comm.allgatherv(in.data(), in.size(), DataType::kUInt8, out);
    } catch (const CommError& e) {
      msgs[rank] = e.what();
    }
  }, o);
  for (auto& m : msgs) {
    INFO(m);
    CHECK(m.find("rank 1's allgather header announces 2000 bytes") != std::string::npos);
  }
}

TEST_CASE("negotiation: absurd counts and lengths from a peer are refused with CommError", "[collective][mesh]") {
  using collective::decode_negotiation;
  using collective::encode_negotiation;
  using collective::NegotiationMessage;
  collective::Engine::Desc d;
  d.kind = collective::kAllreduce;
  d.count = 10;
  std::vector<NegotiationMessage::Fresh> fresh{{d, "grad.w"}};
  std::vector<uint8_t> good = encode_negotiation(3, {0b101}, fresh);
  NegotiationMessage m = decode_negotiation(good.data(), good.size(), 3, 1);
  CHECK(m.cached == std::vector<uint32_t>{0, 2});
  REQUIRE(m.fresh.size() == 1);
  CHECK(m.fresh[0].name == "grad.w");
  auto refused = [](std::vector<uint8_t> b, uint32_t cache, const std::string& want) {
    try {
      decode_negotiation(b.data(), b.size(), cache, 2);
    } catch (const CommError& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find("rank 2") != std::string::npos);
      CHECK(std::string(e.what()).find(want) != std::string::npos);
      return;
    }
    FAIL("accepted: " << want);
  };
  // 4 billion fresh requests in a few bytes.
  std::vector<uint8_t> many = encode_negotiation(0, {}, {});
  std::memset(many.data() + 8, 0xff, 4);
  refused(many, 0, "fresh request count 4294967295 cannot fit");
  // A name length of ~4 GiB.
  std::vector<uint8_t> long_name = encode_negotiation(0, {}, fresh);
  const uint32_t huge = 0xfffffff0u;
  std::memcpy(long_name.data() + 12 + 15, &huge, 4);
  refused(long_name, 0, "request name length 4294967280 exceeds");
  refused(encode_negotiation(3, {0b1000}, {}), 3, "cache bit 3 beyond the cache");
  refused(encode_negotiation(2, {0}, {}), 3, "caches diverged");
  std::vector<uint8_t> trailing = good;
  trailing.push_back(0);
  refused(trailing, 3, "trailing");
  collective::Engine::Desc bad = d;
  bad.dtype = 200;
  refused(encode_negotiation(0, {}, {{bad, "x"}}), 0, "unknown kind/dtype/op");
}

TEST_CASE("negotiation: a peer listing one request twice fails the round with CommError, not an invariant error",
          "[collective][mesh]") {
  FakeRank fake;
  std::shared_ptr<Communicator> c0 = real_rank0_with(fake, "dupneg");
  // Rank 1 lists "x" twice: with rank 0 not listing it, it would look present on both ranks.
  collective::Engine::Desc d;
  d.kind = collective::kAllreduce;
  d.count = 1;
  std::vector<uint8_t> msg = collective::encode_negotiation(0, {}, {{d, "x"}, {d, "x"}});
  using Header = collective::TcpCommunicator::Header;
  Header h{collective::kHeaderMagic, static_cast<uint8_t>(collective::Kind::kAllgather),
           static_cast<uint8_t>(DataType::kUInt8), 0, 0, -1, 1, msg.size(), 1, msg.size(), 0};
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  REQUIRE(collective::write_all(fake.send_fd, &h, sizeof(h), deadline));
  REQUIRE(collective::write_all(fake.send_fd, msg.data(), msg.size(), deadline));
  collective::Engine engine(c0, collective::EngineOptions{});
  float y = 1;
  Handle hy = engine.allreduce(&y, 1, DataType::kFloat32, ReduceOp::kSum, "y");
  std::string what;
  try {
    hy.wait();
  } catch (const InternalError& e) {
    what = std::string("InternalError: ") + e.what();
  } catch (const CommError& e) {
    what = e.what();
  }
  engine.stop();
  INFO(what);
  CHECK(what.find("negotiation message of rank 1 lists 'x' twice") != std::string::npos);
}
