// The mesh built from addresses the caller knows (CommunicatorOptions::addresses + listen_fd, as the
// elastic runtime does from its decision; docs/collectives.md, "Mesh bootstrap"): no address goes
// through the store, the caller's listeners stay open and serve the next generation (a dial of an
// older generation waiting there is refused as stale), a rank whose listener is gone is a lost peer
// for the ranks that dial it, and inconsistent options are refused.
#include <catch2/catch.hpp>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <fcntl.h>
#include <string>
#include <vector>

#include "collective/harness.h"
#include "collective/mesh_handshake.h"
#include "collective/tcp_internal.h"

using namespace edl;
using collective::TcpCommunicator;
namespace mesh = edl::collective::mesh;

namespace {

// One listener per rank, as Runtime::mesh_address opens it; closed at the end.
struct Listeners {
  std::vector<int> fds;
  std::vector<std::string> addresses;
  explicit Listeners(int n) {
    for (int r = 0; r < n; ++r) {
      int port = 0;
      fds.push_back(collective::listen_any_port("127.0.0.1", &port));
      addresses.push_back("127.0.0.1:" + std::to_string(port));
    }
  }
  ~Listeners() {
    for (int fd : fds)
      if (fd >= 0) close(fd);
  }
};

CommunicatorOptions direct_options(const Listeners& l, int rank, uint64_t generation, Mesh m) {
  CommunicatorOptions o = test::fast_options(20000);
  o.transport = Transport::kTcp;
  o.mesh = m;
  o.generation = generation;
  o.connect_timeout = std::chrono::milliseconds(5000);
  o.addresses = l.addresses;
  o.listen_fd = l.fds[static_cast<size_t>(rank)];
  return o;
}

bool is_open(int fd) { return fcntl(fd, F_GETFD) != -1; }

// Builds generation `gen` of n thread ranks on the listeners and allreduces once.
void build_and_allreduce(const Listeners& l, int n, uint64_t gen, Mesh m, const std::shared_ptr<Store>& store,
                         const std::string& prefix) {
  test::run_threads(n, [&](int r) {
    auto comm = TcpCommunicator::connect(store, prefix, r, n, direct_options(l, r, gen, m));
    TREQUIRE(comm->sparse() == (m == Mesh::kSparse));
    float x = static_cast<float>(r + 1);
    comm->allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum);
    TREQUIRE(x == static_cast<float>(n * (n + 1) / 2));
  });
}

}  // namespace

TEST_CASE("mesh from known addresses: no address in the store, listeners kept for the next generation",
          "[collective][mesh]") {
  for (auto [n, m] : {std::pair<int, Mesh>{3, Mesh::kFull}, std::pair<int, Mesh>{9, Mesh::kSparse}}) {
    INFO("n=" << n << (m == Mesh::kSparse ? " sparse" : " full"));
    Listeners l(n);
    auto store = make_memory_store();
    const std::string prefix = test::unique_prefix("direct");
    build_and_allreduce(l, n, 1, m, store, prefix);
    CHECK(store->keys(prefix + "addr/").empty());  // nothing published
    for (int fd : l.fds) CHECK(is_open(fd));       // the caller's listeners are left open

    // A dial of generation 1 that nobody accepted waits at rank 0's listener (a failed build's):
    // generation 2 refuses it as stale and builds.
    const int stale = collective::connect_until(l.addresses[0], collective::Clock::now() + std::chrono::seconds(5), nullptr);
    REQUIRE(stale >= 0);
    mesh::Identity id;
    id.generation = 1;
    id.prefix_tag = collective::fnv1a(prefix);
    id.size = n;
    mesh::ConnectSide c(id, 1, 0, std::string(32, 's'));
    const std::string hello = c.hello();
    REQUIRE(send(stale, hello.data(), hello.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(hello.size()));
    build_and_allreduce(l, n, 2, m, store, prefix);
    char b;
    CHECK(recv(stale, &b, 1, 0) == 0);  // closed by rank 0 (no challenge for a stale hello)
    close(stale);
  }
}

TEST_CASE("mesh from known addresses: a rank whose listener is gone is a lost peer for its dialers",
          "[collective][mesh][fault]") {
  const int n = 9, dead = 4;
  Listeners l(n);
  close(l.fds[dead]);  // the process died: its listener refuses
  l.fds[dead] = -1;
  auto store = make_memory_store();
  const std::string prefix = test::unique_prefix("direct-dead");
  std::vector<std::string> outcome(n);
  std::vector<double> seconds(n, 0);
  test::run_threads(n, [&](int r) {
    if (r == dead) return;
    const auto t0 = collective::Clock::now();
    try {
      TcpCommunicator::connect(store, prefix, r, n, direct_options(l, r, 1, Mesh::kSparse));
      outcome[r] = "built";
    } catch (const PeerLostError& e) {
      outcome[r] = std::string("PeerLostError: ") + e.what();
    } catch (const TimeoutError& e) {
      outcome[r] = std::string("TimeoutError: ") + e.what();
    }
    seconds[r] = std::chrono::duration<double>(collective::Clock::now() - t0).count();
  });
  const auto topo = collective::MeshTopology::sparse(dead, n);
  for (int r = 0; r < n; ++r) {
    if (r == dead) continue;
    INFO("rank " << r << ": " << outcome[r] << " after " << seconds[r] << " s");
    CHECK(outcome[r] != "built");  // nobody builds a generation without rank 4
    // Its neighbours dial it: refused at once. (A rank that gave up meanwhile keeps the caller's
    // listener open: its own dialers learn of it by the caller's cancel, or the connect timeout.)
    if (topo.linked(r)) {
      CHECK(outcome[r].find("PeerLostError: ") == 0);
      CHECK(outcome[r].find("refused") != std::string::npos);
      CHECK(seconds[r] < 3.0);
    }
  }
}

TEST_CASE("a listener opened again takes its predecessor's port while that one's connections live",
          "[collective][mesh]") {
  int port = 0, again = 0;
  int lfd = collective::listen_any_port("127.0.0.1", &port, -1);
  const int dialled = collective::connect_until("127.0.0.1:" + std::to_string(port),
                                                collective::Clock::now() + std::chrono::seconds(5), nullptr);
  REQUIRE(dialled >= 0);
  int accepted = -1;
  for (int i = 0; i < 500 && accepted < 0; ++i) {
    accepted = accept(lfd, nullptr, nullptr);
    if (accepted < 0) usleep(1000);
  }
  REQUIRE(accepted >= 0);
  close(lfd);  // the mesh is built: the listener goes, its connection stays
  lfd = collective::listen_any_port("127.0.0.1", &again, port);
  CHECK(again == port);
  int other = 0;
  const int busy = collective::listen_any_port("127.0.0.1", &other, port);  // taken: another port
  CHECK(other != port);
  for (int fd : {lfd, busy, dialled, accepted}) close(fd);
}

TEST_CASE("mesh from known addresses: one address per rank and a listener, or InvalidArgument", "[collective][mesh]") {
  Listeners l(2);
  auto store = make_memory_store();
  CommunicatorOptions o = direct_options(l, 0, 1, Mesh::kFull);
  o.addresses.pop_back();
  CHECK_THROWS_AS(TcpCommunicator::connect(store, "p/", 0, 2, o), InvalidArgument);
  o = direct_options(l, 0, 1, Mesh::kFull);
  o.listen_fd = -1;
  CHECK_THROWS_AS(TcpCommunicator::connect(store, "p/", 0, 2, o), InvalidArgument);
}
