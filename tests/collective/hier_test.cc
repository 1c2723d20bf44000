// Hierarchical allreduce (hierarchy.h): host ids are faked per rank, so ranks on one machine form
// several "hosts" joined by loopback TCP while the ranks of one "host" share memory. Covered: the
// host layout, the choice (auto / 0 / 1, unequal hosts, differing settings), every dtype x op at
// 1-4 local ranks x 2 hosts and 2 x 3 hosts with odd counts on the whole and the sliced path, the
// engine's fused allreduce, mismatches inside a host and between hosts, kill -9 of a local and of a
// remote peer (PeerLostError on every survivor, far below the deadline), abort and the deadline.
#include <catch2/catch.hpp>
#include <cmath>
#include <map>

#include "collective/hierarchy.h"
#include "common/config.h"
#include "harness.h"
#include "reference.h"

using namespace edl;
using edl::collective::Clock;
using edl::collective::HostLayout;
using edl::collective::TcpCommunicator;

namespace {

std::string host_of(int rank, int hosts) { return "h" + std::to_string(rank % hosts); }

CommunicatorOptions hier_options(int rank, int hosts, int timeout_ms = 5000) {
  CommunicatorOptions o = test::fast_options(timeout_ms);
  o.transport = Transport::kAuto;
  o.hierarchical = Hierarchical::kAuto;
  o.host_id = host_of(rank, hosts);
  return o;
}

// Runs fn on n thread ranks spread over `hosts` fake hosts (rank r on host r % hosts).
void run_hier(int n, int hosts, const std::function<void(int, TcpCommunicator&)>& fn,
              const std::function<void(int, CommunicatorOptions&)>& tweak = nullptr) {
  auto options_of = [&](int r) {
    CommunicatorOptions o = hier_options(r, hosts);
    if (tweak) tweak(r, o);
    return o;
  };
  test::run_ranks_with(n, options_of, fn, "hier");
}

void check_every_op(int n, int hosts, const std::vector<size_t>& counts, size_t slice_bytes) {
  std::vector<std::vector<std::vector<uint8_t>>> results(n);
  run_hier(n, hosts, [&](int rank, TcpCommunicator& comm) {
    if (std::string(comm.transport_name()) != "hier") TFAIL("transport " << comm.transport_name() << ", not hier");
    auto t = comm.tuning();
    t.hier_slice_bytes = slice_bytes;
    t.shm_chunk_bytes = 16384;  // several staging rounds on the local level
    t.chunk_bytes = 8192;       // several ring chunks on the cross level
    comm.set_tuning(t);
    test::allreduce_every_op(n, rank, comm, counts, results[rank]);
  });
  for (int r = 1; r < n; ++r) TREQUIRE(results[r] == results[0]);  // bitwise identical on every rank
}

}  // namespace

TEST_CASE("hier: the host layout groups ranks by host id, hosts by their lowest rank", "[collective][hier]") {
  const std::vector<std::string> hosts = {"b", "a", "b", "a", "b", "a"};
  HostLayout l = HostLayout::of(hosts, 3);
  REQUIRE(l.problem.empty());
  CHECK(l.hosts == 2);
  CHECK(l.local_size == 3);
  CHECK(l.host_index == 1);  // "a": its lowest rank (1) comes after "b"'s (0)
  CHECK(l.local_rank == 1);
  CHECK(l.local_members == std::vector<int>{1, 3, 5});
  CHECK(l.cross_members == std::vector<int>{2, 3});
  CHECK(HostLayout::of({"a", "a", "b"}, 0).problem.find("different numbers of ranks") != std::string::npos);
  CHECK(HostLayout::of({"a", "a"}, 0).problem.find("one host") != std::string::npos);
  CHECK(HostLayout::of({"a", "b"}, 0).problem.find("one rank") != std::string::npos);
}

TEST_CASE("hier: chosen for equal hosts under auto, not under 0, unequal hosts or differing settings", "[collective][hier]") {
  auto names = [](int n, int hosts, Hierarchical h0, Hierarchical others) {
    std::vector<std::string> got(n);
    try {
      run_hier(
          n, hosts,
          [&](int r, TcpCommunicator& comm) {
            float x = static_cast<float>(r + 1);
            comm.allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum);
            got[r] = std::string(comm.transport_name()) + (x == n * (n + 1) / 2 ? "" : " wrong sum");
          },
          [&](int r, CommunicatorOptions& o) {
            o.hierarchical = r == 0 ? h0 : others;
            o.connect_timeout = std::chrono::milliseconds(2000);
          });
    } catch (const CommError& e) {
      return std::vector<std::string>(1, std::string("CommError: ") + e.what());
    }
    return got;
  };
  CHECK(names(4, 2, Hierarchical::kAuto, Hierarchical::kAuto) == std::vector<std::string>(4, "hier"));
  CHECK(names(4, 2, Hierarchical::kOn, Hierarchical::kOn) == std::vector<std::string>(4, "hier"));
  CHECK(names(4, 2, Hierarchical::kOff, Hierarchical::kOff) == std::vector<std::string>(4, "tcp"));
  CHECK(names(3, 2, Hierarchical::kAuto, Hierarchical::kAuto) == std::vector<std::string>(3, "tcp"));  // 2 + 1
  auto unequal = names(3, 2, Hierarchical::kOn, Hierarchical::kOn);
  INFO(unequal[0]);
  CHECK(unequal[0].find("EDL_HIERARCHICAL=1, but the hosts have different numbers of ranks") != std::string::npos);
  auto differing = names(4, 2, Hierarchical::kOff, Hierarchical::kAuto);
  INFO(differing[0]);
  CHECK(differing[0].find("EDL_HIERARCHICAL") != std::string::npos);
}

TEST_CASE("hier: every dtype x op, 1-4 local ranks x 2 hosts, whole and sliced, odd counts", "[collective][hier]") {
  for (int local = 2; local <= 4; ++local) {  // 1 local rank per host is the flat path (checked above)
    INFO("local ranks " << local);
    check_every_op(2 * local, 2, {0, 1, 3, 5, 1001}, size_t{64} << 10);  // whole buffer across hosts
    check_every_op(2 * local, 2, {1, 3, 7, 1001, 30011}, 0);             // every buffer sliced
  }
}

TEST_CASE("hier: three hosts of two ranks, sliced and whole, large odd count", "[collective][hier]") {
  check_every_op(6, 3, {2, 5, 100003}, size_t{64} << 10);
}

TEST_CASE("hier: the engine's fused allreduce takes the hierarchical path unchanged", "[collective][hier]") {
  run_hier(4, 2, [](int rank, TcpCommunicator& comm) {
    std::shared_ptr<Communicator> c(&comm, [](Communicator*) {});
    collective::Engine engine(c, collective::EngineOptions{});
    std::vector<std::vector<float>> tensors;
    for (int k = 0; k < 12; ++k) tensors.emplace_back(static_cast<size_t>(1000 * k + 3), static_cast<float>(rank + k));
    std::vector<Handle> handles;
    for (int k = 0; k < 12; ++k)
      handles.push_back(engine.allreduce(tensors[k].data(), tensors[k].size(), DataType::kFloat32,
                                         ReduceOp::kAverage, "t" + std::to_string(k)));
    for (auto& h : handles) h.wait();
    TREQUIRE(engine.stats().fused_collectives >= 1);
    for (int k = 0; k < 12; ++k)
      for (float x : tensors[k]) TREQUIRE(x == 1.5f + static_cast<float>(k));
    engine.stop();
    TREQUIRE(comm.stats().collectives > 0);
  });
}

TEST_CASE("hier: mismatches inside a host and between hosts reach every rank, the communicator stays usable",
          "[collective][hier]") {
  for (size_t base : {size_t{8}, size_t{100000}}) {  // whole and sliced
    std::vector<std::string> msgs(4);
    run_hier(4, 2, [&](int rank, TcpCommunicator& comm) {
      std::vector<float> f(base * 2, 1.0f);
      auto expect = [&](const std::function<void()>& call, const char* needle) {
        try {
          call();
          TFAIL("no MismatchError on rank " << rank);
        } catch (const MismatchError& e) {
          if (std::string(e.what()).find(needle) == std::string::npos)
            TFAIL("rank " << rank << ": '" << e.what() << "' lacks '" << needle << "'");
          msgs[rank] = e.what();
        }
      };
      // Host h1 (ranks 1, 3) calls with another count: detected between hosts.
      expect([&] { comm.allreduce(f.data(), rank % 2 ? base + 1 : base, DataType::kFloat32, ReduceOp::kSum); },
             "count mismatch between hosts");
      // Rank 3 alone uses another op: detected inside host h1, reported to host h0 by the cross step.
      expect([&] { comm.allreduce(f.data(), base, DataType::kFloat32, rank == 3 ? ReduceOp::kMax : ReduceOp::kSum); },
             "mismatch");
      std::vector<float> ok(base, static_cast<float>(rank));
      comm.allreduce(ok.data(), base, DataType::kFloat32, ReduceOp::kSum);
      TREQUIRE(ok[0] == 6.0f && ok[base - 1] == 6.0f);
    });
    CHECK(msgs[0].find("host 1") != std::string::npos);  // h0's ranks learn that host 1 disagreed
    CHECK(msgs[3].find("op mismatch") != std::string::npos);
  }
}

namespace {

// Process rank body: 2 hosts x 2 ranks, allreduce of `floats` forever.
void endless(const std::string& dir, int rank, size_t floats) {
  auto store = std::make_shared<test::FileStore>(dir);
  auto comm = Communicator::create(store, "hier-kill/", rank, 4, hier_options(rank, 2, 20000));
  std::vector<float> v(floats, 1.0f);
  for (;;) comm->allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
}

}  // namespace

TEST_CASE("hier: kill -9 of a rank: PeerLostError on its local and its remote peers, far below the deadline",
          "[collective][hier][fault]") {
  for (size_t floats : {size_t{1} << 18, size_t{16}}) {  // sliced and whole
    INFO("floats " << floats);
    const std::string dir = test::make_temp_dir();
    test::Child child([&] { endless(dir, 3, floats); });  // host h1 with rank 1
    auto store = std::make_shared<test::FileStore>(dir);
    const test::PeerKill got = test::allreduce_until_peer_killed(
        3, [&](int r) { return Communicator::create(store, "hier-kill/", r, 4, hier_options(r, 2, 20000)); },
        floats, 9, 30, [&] { child.signal(SIGKILL); },
        [](Communicator& c) {
          return std::string(static_cast<TcpCommunicator&>(c).transport_name()) == "hier" ? "" : "not hierarchical";
        });
    child.kill_and_reap();
    for (int r = 0; r < 3; ++r) {  // rank 1: local peer of rank 3; ranks 0 and 2: remote
      INFO("rank " << r << ": " << got.ended[r]);
      CHECK(got.ended[r] == "PeerLostError");
      CHECK(got.delay_s[r] >= 0);
      CHECK(got.delay_s[r] < 10.0);  // the 20 s deadline was not what ended it
    }
  }
}

TEST_CASE("hier: abort() from another thread and the deadline end a blocked hierarchical allreduce",
          "[collective][hier][fault]") {
  std::vector<std::string> got(4);
  run_hier(
      4, 2,
      [&](int rank, TcpCommunicator& comm) {
        std::vector<float> v(100000, 1.0f);
        comm.allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
        if (rank == 3) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // never joins the second one
          return;
        }
        std::thread aborter;
        if (rank == 0)
          aborter = std::thread([&comm] {
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
            comm.abort("test abort");
          });
        try {
          comm.allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
          got[rank] = "no error";
        } catch (const AbortedError& e) {
          got[rank] = std::string("AbortedError: ") + e.what();
        } catch (const CommError& e) {
          got[rank] = std::string("CommError: ") + e.what();
        }
        if (aborter.joinable()) aborter.join();
      },
      [](int, CommunicatorOptions& o) { o.timeout = std::chrono::milliseconds(1000); });
  INFO(got[0] << "\n" << got[1] << "\n" << got[2]);
  CHECK(got[0].find("AbortedError: communicator aborted: test abort") == 0);
  // Ranks 1 and 2 fail too: a lost peer (rank 0 shut its sockets) or the 1 s deadline (rank 3 absent).
  CHECK(got[1].find("Error: ") != std::string::npos);
  CHECK(got[2].find("Error: ") != std::string::npos);
}

TEST_CASE("hier: EDL_HIERARCHICAL is read and checked in the configuration", "[collective][hier]") {
  auto with_env = [](const char* hier, const char* transport) {
    setenv("EDL_HIERARCHICAL", hier, 1);
    setenv("EDL_TRANSPORT", transport, 1);
    std::string got;
    try {
      Config c = Config::from_env();
      got = c.hierarchical;
    } catch (const InvalidArgument& e) {
      got = std::string("InvalidArgument: ") + e.what();
    }
    unsetenv("EDL_HIERARCHICAL");
    unsetenv("EDL_TRANSPORT");
    return got;
  };
  CHECK(with_env("auto", "auto") == "auto");
  CHECK(with_env("0", "tcp") == "0");
  CHECK(with_env("1", "auto") == "1");
  CHECK(with_env("yes", "auto").find("EDL_HIERARCHICAL='yes' is not one of auto, 0, 1") != std::string::npos);
  CHECK(with_env("1", "tcp").find("needs EDL_TRANSPORT=auto") != std::string::npos);
  CHECK(collective::hierarchical_from_name("1") == Hierarchical::kOn);
  CHECK(collective::hierarchical_from_name("0") == Hierarchical::kOff);
  CHECK(collective::hierarchical_from_name("auto") == Hierarchical::kAuto);
}
