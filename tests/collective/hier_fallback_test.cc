// The hierarchical allreduce's fallbacks (hierarchy.h, docs/collectives.md "Hierarchical allreduce"):
//  - a host whose shared segment cannot be created (here: RLIMIT_FSIZE below the segment size in a
//    forked child, so memfd's ftruncate fails with EFBIG, as under a restrictive container limit):
//    the local child runs over TCP and the sliced path gathers the slices with an allgatherv over
//    TCP (Hierarchy::gather_over_tcp), fused spans included (a slice spanning several spans is
//    copied first);
//  - a generation whose hosts have uneven rank counts (3+2, 3+1, 2+1), or one rank per host, takes
//    the flat TCP algorithms (direct exchange, halving-doubling, ring), no hierarchical children.
// Every dtype x op (reference.h), odd counts; results bitwise identical on every rank.
#include <signal.h>
#include <sys/resource.h>

#include <catch2/catch.hpp>
#include <fstream>

#include "collective/hierarchy.h"
#include "harness.h"
#include "reference.h"

using namespace edl;
using edl::collective::TcpCommunicator;

namespace {

// Runs fn on thread ranks, rank r on host hosts[r] (transport auto, hierarchical auto).
void run_on_hosts(const std::vector<std::string>& hosts, const std::function<void(int, TcpCommunicator&)>& fn) {
  auto options_of = [&](int r) {
    CommunicatorOptions o = test::fast_options(20000);
    o.transport = Transport::kAuto;
    o.hierarchical = Hierarchical::kAuto;
    o.host_id = hosts[r];
    return o;
  };
  test::run_ranks_with(static_cast<int>(hosts.size()), options_of, fn, "hier-fallback");
}

// Fused spans of odd lengths (slices cut through them); float32 sums of rank + k.
void fused_spans(int n, int rank, TcpCommunicator& comm) {
  std::vector<std::vector<float>> t;
  std::vector<collective::Span> spans;
  for (size_t k = 0; k < 9; ++k) t.emplace_back(k * 1013 + (k % 2), static_cast<float>(rank + k));
  for (auto& v : t) spans.push_back({v.data(), v.size() * sizeof(float)});
  comm.allreduce_spans(spans, DataType::kFloat32, ReduceOp::kSum);
  for (size_t k = 0; k < t.size(); ++k)
    for (float x : t[k])
      if (x != static_cast<float>(n * (n - 1) / 2 + n * static_cast<int>(k))) TFAIL("span " << k << ": " << x);
}

// 2 hosts x `local` ranks with the local segments impossible; "" or the first failure.
std::string gather_over_tcp_run(int local) {
  std::vector<std::string> hosts;
  for (int r = 0; r < 2 * local; ++r) hosts.push_back(r % 2 ? "h1" : "h0");
  const int n = 2 * local;
  std::vector<std::vector<std::vector<uint8_t>>> results(n);
  try {
    run_on_hosts(hosts, [&](int rank, TcpCommunicator& comm) {
      if (std::string(comm.transport_name()) != "hier") TFAIL("transport " << comm.transport_name() << ", not hier");
      if (std::string(comm.hierarchy()->local_transport()) != "tcp")
        TFAIL("local transport " << comm.hierarchy()->local_transport() << ", not tcp");
      auto t = comm.tuning();
      t.hier_slice_bytes = 0;  // every buffer sliced: reduce, cross step, gather over TCP
      t.chunk_bytes = 8192;    // several ring chunks per step
      comm.set_tuning(t);
      test::allreduce_every_op(n, rank, comm, {1, 3, 7, 1001, 30011}, results[rank]);
      fused_spans(n, rank, comm);
    });
  } catch (const std::exception& e) {
    return e.what();
  }
  for (int r = 1; r < n; ++r)
    if (results[r] != results[0]) return "rank " + std::to_string(r) + "'s results differ from rank 0's";
  return "";
}

}  // namespace

TEST_CASE("hier: when a host's segment cannot be created, the sliced path gathers over TCP (every dtype x op)",
          "[collective][hier]") {
  for (int local : {2, 3}) {
    INFO("2 hosts x " << local << " local ranks");
    const std::string dir = test::make_temp_dir();
    const std::string report = dir + "/report";
    edl::testing::SpawnOptions so;
    so.own_group = false;
    auto child = edl::testing::Process::forked(
        [&] {
          // The segment (megabytes) exceeds the file size limit: ftruncate of the memfd fails
          // (EFBIG; SIGXFSZ ignored), every host's local communicator falls back to TCP. The
          // report is small.
          signal(SIGXFSZ, SIG_IGN);
          rlimit lim{64 << 10, 64 << 10};
          if (setrlimit(RLIMIT_FSIZE, &lim) != 0) return 4;
          const std::string got = gather_over_tcp_run(local);
          std::ofstream(report) << got;
          return got.empty() ? 0 : 1;
        },
        so);
    const int status = child.wait(std::chrono::seconds(120));
    std::ifstream f(report);
    std::string got((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    INFO("exit status " << status << ": " << got);
    CHECK(status == 0);
    CHECK(f.is_open());
    CHECK(got.empty());
  }
}

TEST_CASE("hier: uneven rank counts per host and one rank per host take the flat TCP algorithms (every dtype x op)",
          "[collective][hier]") {
  const std::vector<std::vector<std::string>> layouts = {
      {"a", "a", "a", "b", "b"}, {"a", "b", "a", "a"}, {"a", "a", "b"}, {"a", "b"}, {"a", "b", "c"}};
  for (const auto& hosts : layouts) {
    const int n = static_cast<int>(hosts.size());
    INFO(n << " ranks, rank 0 on " << hosts[0] << ", last on " << hosts.back());
    std::vector<std::vector<std::vector<uint8_t>>> results(n);
    std::vector<collective::CommStats> stats(n);
    run_on_hosts(hosts, [&](int rank, TcpCommunicator& comm) {
      if (std::string(comm.transport_name()) != "tcp" || comm.hierarchy() != nullptr)
        TFAIL("transport " << comm.transport_name() << ", not the flat tcp");
      auto t = comm.tuning();
      t.eager_bytes = 4096;  // small buffers: direct exchange; then halving-doubling; large: the ring
      t.direct_total_bytes = 4 * 4096;
      t.hd_max_bytes = t.hd_max_bytes_2_ranks = t.hd_max_bytes_one_host = 64 << 10;
      t.hd_min_ranks = 2;
      t.chunk_bytes = 8192;
      comm.set_tuning(t);
      test::allreduce_every_op(n, rank, comm, {1, 3, 5001, 100003}, results[rank]);
      fused_spans(n, rank, comm);
      stats[rank] = comm.stats();
    });
    for (int r = 1; r < n; ++r) CHECK(results[r] == results[0]);
    CHECK(stats[0].eager_allreduces > 0);
    CHECK(stats[0].halving_doubling_allreduces > 0);
    CHECK(stats[0].ring_allreduces > 0);
  }
}
