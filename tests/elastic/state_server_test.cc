// Stop-free joins, the pieces: the snapshot skeleton, the survivors' StateServer and the newcomer's
// striped StateFetch over real loopback sockets (docs/elastic.md, "Stop-free joins").
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "collective/socket.h"
#include "edl/error.h"
#include "edl/state.h"
#include "elastic/snapshot.h"
#include "elastic/state_fetch.h"
#include "elastic/state_server.h"

using namespace edl::elastic;
using namespace std::chrono_literals;

namespace {

struct Counter : Stateful {
  int value = 0;
  std::string save() override { return std::to_string(value); }
  void load(const std::string& s) override { value = std::stoi(s); }
};

// Two tensors of different sizes, a scalar and a component, as a State registers them.
struct Model {
  std::vector<float> a;
  std::vector<int32_t> b;
  int64_t scalar = 0;
  Counter counter;
  std::vector<SnapshotItem> items() {
    std::vector<SnapshotItem> v(4);
    v[0].name = "a", v[0].kind = SnapshotItem::kTensor, v[0].data = a.data(), v[0].bytes = a.size() * 4;
    v[1].name = "scalar", v[1].kind = SnapshotItem::kScalar, v[1].data = &scalar, v[1].bytes = 8;
    v[2].name = "b", v[2].kind = SnapshotItem::kTensor, v[2].data = b.data(), v[2].bytes = b.size() * 4;
    v[3].name = "counter", v[3].kind = SnapshotItem::kComponent, v[3].component = &counter;
    return v;
  }
  std::vector<iovec> space() { return {iovec{a.data(), a.size() * 4}, iovec{b.data(), b.size() * 4}}; }
};

Model filled(size_t n, float seed) {
  Model m;
  m.a.resize(n);
  m.b.resize(n / 3 + 1);
  for (size_t i = 0; i < m.a.size(); ++i) m.a[i] = seed + 0.25f * static_cast<float>(i);
  for (size_t i = 0; i < m.b.size(); ++i) m.b[i] = static_cast<int32_t>(i * 7) - 5;
  m.scalar = 42;
  m.counter.value = 9;
  return m;
}

std::shared_ptr<const std::string> commit_of(Model& m, int64_t step) {
  return std::make_shared<const std::string>(encode_snapshot(m.items(), 1, step, {"job", "lin"}));
}

StateServerOptions server_options(const std::string& secret = "s3cret") {
  StateServerOptions o;
  o.job = "job";
  o.secret = secret;
  o.io_timeout = 3000ms;
  return o;
}

StateFetchOptions fetch_options(int rank, int size, const std::string& secret = "s3cret") {
  StateFetchOptions o;
  o.job = "job";
  o.secret = secret;
  o.generation = 4;
  o.rank = rank;
  o.size = size;
  o.io_timeout = 3000ms;
  return o;
}

}  // namespace

TEST_CASE("a skeleton carries everything but the tensors, whose sizes it checks", "[stopfree][snapshot]") {
  Model src = filled(1000, 1.0f);
  const std::string full = encode_snapshot(src.items(), 3, 17, {"job", "lin"});
  const std::string skel = snapshot_skeleton(full, "test");
  CHECK(skel.size() + (src.a.size() + src.b.size()) * 4 == full.size() + 2 * 8);
  Model dst = filled(1000, 5.0f);
  dst.scalar = 0;
  dst.counter.value = 0;
  int64_t epoch = 0, step = 0;
  SnapshotIdentity got;
  decode_skeleton(skel, dst.items(), &epoch, &step, "test", {"job", ""}, &got);
  CHECK(epoch == 3);
  CHECK(step == 17);
  CHECK(got.lineage == "lin");
  CHECK(dst.scalar == 42);
  CHECK(dst.counter.value == 9);
  CHECK(dst.a[0] == 5.0f);  // tensors untouched
  Model other = filled(999, 0.0f);  // a tensor of another size: refused before anything is written
  other.scalar = 0;
  CHECK_THROWS_WITH(decode_skeleton(skel, other.items(), &epoch, &step, "skel"),
                    Catch::Contains("skel") && Catch::Contains("'a'") && Catch::Contains("bytes"));
  CHECK(other.scalar == 0);
  CHECK_THROWS_AS(decode_skeleton(full, dst.items(), &epoch, &step, "full"), edl::DataError);  // not a skeleton
  const auto spans = snapshot_payloads(full, "test");
  REQUIRE(spans.size() == 4);
  CHECK(std::memcmp(full.data() + spans[0].offset, src.a.data(), spans[0].size) == 0);
  CHECK(std::memcmp(full.data() + spans[2].offset, src.b.data(), spans[2].size) == 0);
}

TEST_CASE("a fetch striped over three servers writes exactly the served commit's bytes", "[stopfree][server]") {
  Model src = filled(300000, 2.0f);
  auto commit = commit_of(src, 10);
  std::vector<std::unique_ptr<StateServer>> servers;
  std::vector<FetchSource> sources;
  for (int r = 0; r < 3; ++r) {
    servers.push_back(std::make_unique<StateServer>(server_options()));
    servers.back()->set_generation(4, r, 4);
    servers.back()->boundary(10, commit);
    sources.push_back({r, servers.back()->address()});
  }
  Model dst = filled(300000, -1.0f);
  std::atomic<bool> cancel{false};
  StateFetch f(fetch_options(3, 4), sources, dst.space(), &cancel);
  REQUIRE(f.total() == (src.a.size() + src.b.size()) * 4);
  // Three uneven chunks, the middle one spanning both tensors.
  const uint64_t cut1 = 12345, cut2 = src.a.size() * 4 + 1001;
  CHECK(f.fetch(10, 0, cut1));
  CHECK(f.fetch(10, cut1, cut2 - cut1));
  CHECK(f.fetch(10, cut2, f.total() - cut2));
  CHECK(std::memcmp(dst.a.data(), src.a.data(), src.a.size() * 4) == 0);
  CHECK(std::memcmp(dst.b.data(), src.b.data(), src.b.size() * 4) == 0);
  uint64_t served = 0;  // a server counts its bytes once its send returned: give it a moment
  for (int k = 0; k < 200 && served != f.total(); ++k) {
    if (k > 0) std::this_thread::sleep_for(10ms);
    served = 0;
    for (auto& s : servers) served += s->served_bytes();
  }
  CHECK(served == f.total());
  for (auto& s : servers) CHECK(s->served_bytes() > 0);  // every server sent a slice
}

TEST_CASE("a request for a step the server did not commit is answered, not hung", "[stopfree][server]") {
  Model src = filled(1000, 2.0f);
  StateServer server(server_options());
  server.set_generation(4, 0, 2);
  server.boundary(10, commit_of(src, 10));
  Model dst = filled(1000, 0.0f);
  std::atomic<bool> cancel{false};
  StateFetch f(fetch_options(1, 2), {{0, server.address()}}, dst.space(), &cancel);
  // Step 11 not reached yet: the request waits for the boundary; passed without a commit -> false.
  std::thread later([&] {
    std::this_thread::sleep_for(100ms);
    server.boundary(11, nullptr);
  });
  CHECK_FALSE(f.fetch(11, 0, 100));
  later.join();
  CHECK(f.fetch(10, 0, 100));  // still its last commit
  server.boundary(12, commit_of(src, 12));
  CHECK_FALSE(f.fetch(10, 0, 100));  // moved on past 10: gone
  CHECK(f.fetch(12, 0, f.total()));  // the same connection still works
  CHECK(std::memcmp(dst.a.data(), src.a.data(), src.a.size() * 4) == 0);
  CHECK_THROWS_AS(f.fetch(12, f.total() - 10, 20), edl::InvalidArgument);
}

TEST_CASE("a newcomer with another job secret or generation is refused", "[stopfree][server][auth]") {
  Model src = filled(1000, 2.0f);
  StateServer server(server_options("right"));
  server.set_generation(4, 0, 2);
  server.boundary(10, commit_of(src, 10));
  Model dst = filled(1000, 0.0f);
  std::atomic<bool> cancel{false};
  StateFetch wrong(fetch_options(1, 2, "wrong"), {{0, server.address()}}, dst.space(), &cancel);
  CHECK_THROWS_AS(wrong.fetch(10, 0, 100), edl::AuthError);
  auto stale_opts = fetch_options(1, 2, "right");
  stale_opts.generation = 3;
  StateFetch stale(stale_opts, {{0, server.address()}}, dst.space(), &cancel);
  CHECK_THROWS_AS(stale.fetch(10, 0, 100), edl::PeerLostError);
  StateFetch good(fetch_options(1, 2, "right"), {{0, server.address()}}, dst.space(), &cancel);
  CHECK(good.fetch(10, 0, good.total()));
}

TEST_CASE("garbage on a state server's socket ends that connection only", "[stopfree][server]") {
  Model src = filled(1000, 2.0f);
  StateServer server(server_options());
  server.set_generation(4, 0, 2);
  server.boundary(10, commit_of(src, 10));
  int fd = edl::collective::connect_until(server.address(), std::chrono::steady_clock::now() + 2s);
  REQUIRE(fd >= 0);
  std::string junk(200, 'x');
  CHECK(::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(junk.size()));
  char c;
  CHECK(::recv(fd, &c, 1, 0) <= 0);  // the server closed it
  ::close(fd);
  Model dst = filled(1000, 0.0f);
  std::atomic<bool> cancel{false};
  StateFetch f(fetch_options(1, 2), {{0, server.address()}}, dst.space(), &cancel);
  CHECK(f.fetch(10, 0, f.total()));
}

TEST_CASE("a server that dies during a fetch is a PeerLostError, a cancel ends a fetch at once",
          "[stopfree][server][kill]") {
  Model src = filled(1000, 2.0f);
  auto server = std::make_unique<StateServer>(server_options());
  server->set_generation(4, 0, 2);
  server->boundary(10, commit_of(src, 10));
  Model dst = filled(1000, 0.0f);
  std::atomic<bool> cancel{false};
  StateFetch f(fetch_options(1, 2), {{0, server->address()}}, dst.space(), &cancel);
  f.connect();
  std::thread killer([&] {
    std::this_thread::sleep_for(100ms);
    server.reset();  // its process dies while the request for step 11 waits
  });
  CHECK_THROWS_AS(f.fetch(11, 0, 100), edl::PeerLostError);
  killer.join();

  StateServer slow(server_options());
  slow.set_generation(4, 0, 2);
  StateFetch g(fetch_options(1, 2), {{0, slow.address()}}, dst.space(), &cancel);
  g.connect();
  std::thread canceller([&] {
    std::this_thread::sleep_for(100ms);
    cancel.store(true);
  });
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(g.fetch(20, 0, 100), edl::AbortedError);
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
  canceller.join();
}
