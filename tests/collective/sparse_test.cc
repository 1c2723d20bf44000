// The sparse mesh with ranks as threads (docs/collectives.md, "Sparse mesh"): the topology's bound
// of 2 floor(log2 n) + 4 sockets for every n up to 64 and around powers of two up to 4096; sockets per rank of real communicators at
// 8, 32 and 64 ranks; the collectives at rank counts with and without a fold (every root of the
// scatter-allgather broadcast, allgatherv, mismatches, the max_gather_bytes cap); the negotiation of
// many tensors over many ranks: correct, and O(log n) messages per round (counted).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <tuple>

#include "collective/mesh_topology.h"
#include "collective/negotiation_reduce.h"
#include "harness.h"

using namespace edl;
using edl::collective::MeshTopology;
using edl::collective::TcpCommunicator;

namespace {

int socket_bound(int n) { return static_cast<int>(std::floor(2 * std::log2(n) + 4)); }

CommunicatorOptions sparse_options(int timeout_ms = 20000) {
  CommunicatorOptions o = test::fast_options(timeout_ms);
  o.transport = Transport::kTcp;
  o.mesh = Mesh::kSparse;
  o.connect_timeout = std::chrono::milliseconds(30000);
  return o;
}

}  // namespace

TEST_CASE("sparse mesh: every rank links at most 2 floor(log2 n) + 4 sockets' worth of peers, symmetrically",
          "[collective][sparse]") {
  std::vector<int> sizes;
  for (int n = 2; n <= 64; ++n) sizes.push_back(n);
  for (int n : {100, 127, 128, 129, 255, 256, 257, 1000, 1023, 1024, 1025, 4095, 4096}) sizes.push_back(n);
  for (int n : sizes) {
    std::vector<MeshTopology> t;
    for (int r = 0; r < n; ++r) t.push_back(MeshTopology::sparse(r, n));
    for (int r = 0; r < n; ++r) {
      INFO("n=" << n << " rank " << r);
      REQUIRE(2 * static_cast<int>(t[r].peers().size()) <= socket_bound(n));
      REQUIRE(t[r].linked((r + 1) % n));  // ring
      const int v = t[r].virtual_rank();
      if (v >= 0)
        for (int m = 1; m < t[r].p2(); m <<= 1) REQUIRE(t[r].linked(t[r].real(v ^ m)));  // hypercube
      if (t[r].folded_out()) REQUIRE(t[r].linked(r + 1));
      for (int p : t[r].peers()) REQUIRE(t[p].linked(r));  // every link is used from both ends
    }
  }
  CHECK(MeshTopology::full(3, 8).peers().size() == 7);
}

TEST_CASE("sparse mesh: sockets per rank at 8, 32 and 64 ranks stay within 2 log2(n) + 4",
          "[collective][sparse]") {
  for (int n : {8, 32, 64}) {
    std::vector<int> sockets(n), peers(n);
    CommunicatorOptions o = test::fast_options(30000);
    o.transport = Transport::kTcp;  // Mesh::kAuto: sparse above 4 ranks
    o.connect_timeout = std::chrono::milliseconds(60000);
    test::run_ranks_with(
        n, [&](int) { return o; },
        [&](int rank, TcpCommunicator& comm) {
          TREQUIRE(comm.sparse());
          sockets[rank] = comm.socket_count();
          peers[rank] = static_cast<int>(comm.topology().peers().size());
          float x = 1;
          comm.allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum);
          TREQUIRE(x == static_cast<float>(n));
        },
        "sockets");
    for (int r = 0; r < n; ++r) {
      INFO("n=" << n << " rank " << r);
      CHECK(sockets[r] == 2 * peers[r]);
      CHECK(sockets[r] <= socket_bound(n));
    }
  }
  // Mesh::kAuto: the full mesh up to 4 ranks, up to 8 where the shared-memory transport may be
  // chosen (it wakes every peer through its socket), at any size where it is required.
  CommunicatorOptions o;
  for (auto [transport, n, full] : {std::tuple<Transport, int, bool>{Transport::kTcp, 4, true},
                                    {Transport::kTcp, 5, false},
                                    {Transport::kAuto, 8, true},
                                    {Transport::kAuto, 9, false},
                                    {Transport::kShm, 64, true}}) {
    o.transport = transport;
    CHECK(TcpCommunicator::full_mesh(n, o) == full);
  }
}

TEST_CASE("sparse mesh: broadcast from every root (binomial and scatter-allgather), allgatherv, barrier",
          "[collective][sparse]") {
  for (int n : {5, 6, 7, 8, 12}) {
    test::run_ranks(
        n,
        [n](int rank, TcpCommunicator& comm) {
          collective::AlgorithmTuning t = comm.tuning();
          t.eager_bytes = 4096;  // larger broadcasts take the scatter-allgather path
          comm.set_tuning(t);
          for (int root = 0; root < n; ++root)
            for (size_t count : {0ul, 1ul, 5ul, 511ul, 513ul, 20011ul}) {
              std::vector<int64_t> v(count, rank == root ? 1000 + root : -1);
              for (size_t i = 0; i < count; ++i)
                if (rank == root) v[i] += static_cast<int64_t>(i);
              comm.broadcast(v.data(), count, DataType::kInt64, root);
              for (size_t i = 0; i < count; ++i) TREQUIRE(v[i] == 1000 + root + static_cast<int64_t>(i));
            }
          std::vector<double> mine(static_cast<size_t>(rank) * 3 + (rank == 3 ? 5000 : 0), rank + 0.5);
          std::vector<uint8_t> out;
          std::vector<size_t> counts;
          comm.allgatherv(mine.data(), mine.size(), DataType::kFloat64, out, &counts);
          test::check_gathered(out, counts, n, [](int r) { return static_cast<size_t>(r) * 3 + (r == 3 ? 5000 : 0); });
          comm.barrier();
        },
        sparse_options());
  }
}

TEST_CASE("sparse mesh: every rank gets the full mesh's MismatchError naming the lowest differing rank",
          "[collective][sparse]") {
  const int n = 7;
  for (size_t base : {8ul, 100000ul}) {  // recursive doubling and halving-doubling sizes
    std::vector<std::vector<std::string>> messages(n);
    test::run_ranks(
        n,
        [&](int rank, TcpCommunicator& comm) {
          const bool odd = rank == 3 || rank == 5;
          std::vector<float> f(base * 2 + 64, 1.0f);
          try {
            comm.allreduce(f.data(), odd ? base / 2 : base, DataType::kFloat32, ReduceOp::kSum);
            TFAIL("no MismatchError");
          } catch (const MismatchError& e) {
            messages[rank].push_back(e.what());
          }
          try {
            if (rank == 6) comm.barrier();
            else comm.broadcast(f.data(), base, DataType::kFloat32, 0);
            TFAIL("no MismatchError");
          } catch (const MismatchError& e) {
            messages[rank].push_back(e.what());
          }
          for (size_t i = 0; i < f.size(); ++i) TREQUIRE(f[i] == 1.0f);
          std::vector<float> ok(base, static_cast<float>(rank));
          comm.allreduce(ok.data(), base, DataType::kFloat32, ReduceOp::kSum);
          TREQUIRE(ok[base - 1] == static_cast<float>(n * (n - 1) / 2));
        },
        sparse_options());
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r);
      REQUIRE(messages[r].size() == 2);
      CHECK(messages[r][0] == "allreduce count mismatch: rank 0 has " + std::to_string(base) + " elements, rank 3 has " +
                                  std::to_string(base / 2));
      CHECK(messages[r][1] == "collective mismatch: rank 0 called broadcast, rank 6 called barrier");
    }
  }
}

TEST_CASE("sparse mesh: an allgather contribution above max_gather_bytes fails on every rank, naming it",
          "[collective][sparse]") {
  CommunicatorOptions o = sparse_options();
  o.max_gather_bytes = 1000;
  const int n = 6;
  std::vector<std::string> msgs(n);
  test::run_ranks(
      n,
      [&](int rank, TcpCommunicator& comm) {
        std::vector<uint8_t> in(rank == 4 ? 2000 : 10, 7), out;
        try {
          comm.allgatherv(in.data(), in.size(), DataType::kUInt8, out);
        } catch (const CommError& e) {
          msgs[rank] = e.what();
        }
        TREQUIRE(out.capacity() == 0);
      },
      o);
  for (auto& m : msgs) {
    INFO(m);
    CHECK(m.find("rank 4's allgather header announces 2000 bytes, more than max_gather_bytes (1000)") !=
          std::string::npos);
  }
}

namespace {

// Engines on the sparse mesh: `tensors` named allreduces per rank and step, submitted in a
// per-rank shuffled order; returns every rank's engine and transport counters.
void negotiate_many(int n, int tensors, int steps, std::vector<collective::EngineStats>& es,
                    std::vector<collective::CommStats>& cs) {
  es.assign(n, {});
  cs.assign(n, {});
  std::atomic<int> counted{0};
  test::run_ranks(
      n,
      [&](int rank, TcpCommunicator& comm) {
        std::shared_ptr<Communicator> c(&comm, [](Communicator*) {});
        collective::Engine engine(c, collective::EngineOptions{});
        std::mt19937 rng(static_cast<unsigned>(rank) * 7919u + 1);
        std::vector<std::vector<float>> t(tensors, std::vector<float>(100));
        for (int step = 0; step < steps; ++step) {
          std::vector<int> order(tensors);
          for (int i = 0; i < tensors; ++i) order[i] = i;
          std::shuffle(order.begin(), order.end(), rng);
          std::vector<Handle> hs;
          for (int i : order) {
            std::fill(t[i].begin(), t[i].end(), static_cast<float>(rank + i + step));
            hs.push_back(engine.allreduce(t[i].data(), t[i].size(), DataType::kFloat32, ReduceOp::kSum,
                                          "grad." + std::to_string(i)));
          }
          for (auto& h : hs) h.wait();
          for (int i = 0; i < tensors; ++i)
            for (float x : t[i]) TREQUIRE(x == static_cast<float>(n * (n - 1) / 2 + n * (i + step)));
        }
        // Counters before any rank stops: a stopping engine's closed sockets wake its neighbours' engines.
        es[rank] = engine.stats();
        cs[rank] = comm.stats();
        ++counted;
        while (counted.load() < n) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        engine.stop();
      },
      sparse_options());
}

}  // namespace

TEST_CASE("sparse mesh: the negotiation of many tensors over many ranks, O(log n) messages per round (counted)",
          "[collective][sparse][engine]") {
  for (int n : {16, 12}) {
    std::vector<collective::EngineStats> es;
    std::vector<collective::CommStats> cs;
    negotiate_many(n, 200, 3, es, cs);
    const MeshTopology t = MeshTopology::sparse(0, n);
    const int log2p2 = static_cast<int>(std::log2(t.p2()));
    for (int r = 0; r < n; ++r) {
      INFO("n=" << n << " rank " << r);
      // The setup's allgather, every negotiation round and every collective (one recursive-doubling
      // allreduce of the fused tensors here) is one combine; nothing else travels.
      CHECK(cs[r].combines == 1 + es[r].cycles + es[r].collectives);
      CHECK(es[r].completed == 600u);
      // A combine sends log2(p2) messages at a power of two; with a fold at most 2 more (odd ranks
      // below 2*rem) or a single one (even ranks below 2*rem). An allgather would send n - 1.
      const auto t_r = MeshTopology::sparse(r, n);
      const uint64_t per = t_r.folded_out() ? 1 : log2p2 + (t_r.folds_in() ? 2 : 0);
      CHECK(cs[r].messages_sent == per * cs[r].combines);
      CHECK(per < static_cast<uint64_t>(n - 1));
    }
  }
}

TEST_CASE("sparse mesh: a cached name whose descriptor changes on some ranks fails on every rank, naming them",
          "[collective][sparse][engine]") {
  const int n = 12;
  for (int changer : {5, 0}) {  // a rank other than 0 (rank 0 lists the name by its cache bit) and rank 0
    std::vector<std::string> got(n);
    test::run_ranks(
        n,
        [&](int rank, TcpCommunicator& comm) {
          std::shared_ptr<Communicator> c(&comm, [](Communicator*) {});
          collective::Engine engine(c, collective::EngineOptions{});
          std::vector<float> w(100, 1.0f);
          engine.allreduce(w.data(), 100, DataType::kFloat32, ReduceOp::kSum, "w").wait();  // cached now
          const size_t count = rank == changer || (changer == 0 && rank == 7) ? 50 : 100;
          try {
            engine.allreduce(w.data(), count, DataType::kFloat32, ReduceOp::kSum, "w").wait();
            got[rank] = "no error";
          } catch (const MismatchError& e) {
            got[rank] = e.what();
          }
          float x = 1;  // the engine goes on
          engine.allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum, "after").wait();
          TREQUIRE(x == static_cast<float>(n));
          engine.stop();
        },
        sparse_options());
    const std::string want = changer == 0 ? "allreduce 'w' count mismatch: rank 0 has 50 elements, rank 1 has 100"
                                          : "allreduce 'w' count mismatch: rank 0 has 100 elements, rank 5 has 50";
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r);
      CHECK(got[r] == want);
    }
  }
}

TEST_CASE("sparse mesh: ranks on two hosts take the hierarchical allreduce under a sparse parent",
          "[collective][sparse][hier]") {
  const int n = 10;  // above kShmFullMeshRanks: the parent is sparse; 5 ranks per host share memory
  std::vector<std::string> transports(n);
  test::run_ranks_with(
      n,
      [](int r) {
        CommunicatorOptions o = test::fast_options(20000);
        o.transport = Transport::kAuto;
        o.host_id = "host" + std::to_string(r % 2);
        return o;
      },
      [&](int rank, TcpCommunicator& comm) {
        TREQUIRE(comm.sparse());
        transports[rank] = comm.transport_name();
        for (size_t count : {3ul, 100000ul}) {  // whole and sliced
          std::vector<float> v(count, static_cast<float>(rank));
          comm.allreduce(v.data(), count, DataType::kFloat32, ReduceOp::kSum);
          for (float x : v) TREQUIRE(x == static_cast<float>(n * (n - 1) / 2));
        }
      },
      "hier-sparse");
  for (const auto& t : transports) CHECK(t == "hier");
}

TEST_CASE("sparse mesh: the combined negotiation message round-trips and refuses malformed input with CommError",
          "[collective][sparse][engine]") {
  using collective::ReducedNegotiation;
  ReducedNegotiation m;
  m.cache_size = 70;
  m.ranks = 3;
  m.all = {1, 0};
  m.any = {3, 1ull << 5};
  ReducedNegotiation::Record a, b;
  a.name = "alpha";
  a.count = 2;
  a.lo_rank = 0;
  a.lo_desc = collective::Engine::Desc{collective::kAllreduce, 0, 0, -1, 10};
  b = a;
  b.name = "beta";
  b.count = 1;
  b.lo_rank = 1;
  b.bad_rank = -1;
  m.fresh = {a, b};
  const std::vector<uint8_t> bytes = collective::encode_reduced(m);
  const ReducedNegotiation back = collective::decode_reduced(bytes.data(), bytes.size(), 70, 8, "test");
  CHECK(collective::encode_reduced(back) == bytes);
  auto refused = [&](std::vector<uint8_t> v, uint32_t cache, const char* needle) {
    INFO(needle);
    try {
      collective::decode_reduced(v.data(), v.size(), cache, 8, "rank 3");
      FAIL("accepted");
    } catch (const CommError& e) {
      CHECK(std::string(e.what()).find(needle) != std::string::npos);
    }
  };
  refused(std::vector<uint8_t>(bytes.begin(), bytes.end() - 3), 70, "truncated");
  refused(bytes, 71, "the caches diverged");
  std::vector<uint8_t> v = bytes;
  v[0] ^= 1;
  refused(v, 70, "bad magic");
  ReducedNegotiation u = m;
  std::swap(u.fresh[0], u.fresh[1]);
  refused(collective::encode_reduced(u), 70, "not sorted");
  u = m;
  u.fresh[0].count = 4;  // more than the 3 ranks the message stands for
  refused(collective::encode_reduced(u), 70, "has count 4");
  u = m;
  u.all = {4, 0};  // listed by all, but not by any
  refused(collective::encode_reduced(u), 70, "not by any");
  u = m;
  u.any = {3, 1ull << 10};  // bit 74 of a 70-entry cache
  refused(collective::encode_reduced(u), 70, "beyond the cache");
  u = m;
  u.fresh[1].lo_desc.kind = collective::kLastKind + 1;
  refused(collective::encode_reduced(u), 70, "unknown kind");
  // Merging: counts add up, the lower block's lowest rank stays, the lowest differing rank wins.
  ReducedNegotiation lo = m, hi = m;
  hi.fresh[0].lo_rank = 5;
  hi.fresh[0].lo_desc.count = 11;
  collective::merge_reduced(lo, hi, true);
  CHECK(lo.ranks == 6);
  CHECK(lo.fresh[0].count == 4);
  CHECK(lo.fresh[0].lo_rank == 0);
  CHECK(lo.fresh[0].bad_rank == 5);
  CHECK(lo.all == std::vector<uint64_t>{1, 0});
}

TEST_CASE("sparse mesh: one_host_known skips the transport exchange after the build", "[collective][sparse][setup]") {
  const int n = 9;
  std::vector<uint64_t> combines(n, 99);
  std::vector<int> one_host(n, -1);
  test::run_ranks_with(
      n,
      [](int) {
        CommunicatorOptions o = sparse_options();
        o.one_host_known = true;
        return o;
      },
      [&](int rank, TcpCommunicator& comm) {
        combines[rank] = comm.stats().combines;
        one_host[rank] = comm.one_host() ? 1 : 0;
        std::vector<float> v(100000, static_cast<float>(rank));  // the one-host thresholds choose
        comm.allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
        for (float x : v) TREQUIRE(x == static_cast<float>(n * (n - 1) / 2));
      },
      "one-host-known");
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    CHECK(combines[r] == 0);  // no collective during construction
    CHECK(one_host[r] == 1);  // every rank listens on loopback
  }
  // Without it: the transport hello's allgather (one combine) during construction.
  test::run_ranks_with(
      n, [](int) { return sparse_options(); },
      [&](int rank, TcpCommunicator& comm) {
        combines[rank] = comm.stats().combines;
        one_host[rank] = comm.one_host() ? 1 : 0;
      },
      "one-host-unknown");
  for (int r = 0; r < n; ++r) {
    CHECK(combines[r] == 1);
    CHECK(one_host[r] == 1);
  }
}

TEST_CASE("sparse mesh with one_host_known: a rank with other settings fails the build with CommError naming it",
          "[collective][sparse][setup]") {
  const int n = 9, odd = 4;
  struct Variant {
    const char* what;  // named by the error
    std::function<void(CommunicatorOptions&)> change;
  };
  for (const Variant& v : {Variant{"EDL_TRANSPORT", [](CommunicatorOptions& o) { o.transport = Transport::kAuto; }},
                           Variant{"EDL_HIERARCHICAL", [](CommunicatorOptions& o) { o.hierarchical = Hierarchical::kOn; }},
                           Variant{"one_host_known", [](CommunicatorOptions& o) { o.one_host_known = false; }}}) {
    INFO(v.what);
    auto store = make_memory_store();
    const std::string prefix = test::unique_prefix("setup-mismatch");
    std::vector<std::string> kind(n), message(n);
    test::run_threads(n, [&](int r) {
      CommunicatorOptions o = sparse_options(5000);
      o.one_host_known = true;
      if (r == odd) v.change(o);
      try {
        auto comm = TcpCommunicator::connect(store, prefix, r, n, o);
        float x = 1;  // a rank that is no neighbour may finish the build: its first collective fails
        comm->allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum);
        kind[r] = "none";
      } catch (const CommError& e) {
        kind[r] = dynamic_cast<const PeerLostError*>(&e) ? "lost" : "comm";
        message[r] = e.what();
      } catch (const std::exception& e) {
        kind[r] = "other";
        message[r] = e.what();
      }
    });
    // The first handshake across the difference to complete fails with CommError naming the
    // setting and the rank; that rank's connections close, so the others fail as when a rank dies
    // during the build (PeerLostError), or at their first collective. Nobody succeeds or hangs.
    int named = 0;
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r << ": " << kind[r] << " " << message[r]);
      CHECK((kind[r] == "comm" || kind[r] == "lost"));
      if (kind[r] != "comm") continue;
      CHECK(message[r].find(v.what) != std::string::npos);
      const bool about_odd = message[r].find("rank " + std::to_string(odd)) != std::string::npos;
      CHECK((r == odd || about_odd));
      ++named;
    }
    CHECK(named >= 1);
  }
}
