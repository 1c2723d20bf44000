// The TCP path's allreduce algorithms (direct exchange, halving-doubling, ring on the full mesh;
// recursive doubling, halving-doubling, ring on the sparse mesh), each forced through AlgorithmTuning
// at 2-5 ranks (full) and 2-9 ranks (sparse: powers of two and folds of 1-3 pairs), every dtype x
// op, sizes from 1 element to non-divisible large counts, fused spans: results equal the reference
// and are bitwise identical on every rank; the stats prove which algorithm ran. Also the automatic
// choice by size and ranks.
#include <catch2/catch.hpp>
#include <cmath>

#include "harness.h"
#include "reference.h"

using namespace edl;
using edl::collective::AlgorithmTuning;
using edl::collective::AllreduceAlgorithm;
using edl::collective::TcpCommunicator;
using edl::Mesh;

namespace {

AlgorithmTuning forcing(AlgorithmTuning t, AllreduceAlgorithm a) {
  t.eager_bytes = a == AllreduceAlgorithm::kDirect ? (size_t{1} << 30) : 0;
  t.direct_total_bytes = t.eager_bytes * 8;
  t.hd_max_bytes = a == AllreduceAlgorithm::kHalvingDoubling ? (size_t{1} << 30) : 0;
  t.hd_max_bytes_2_ranks = t.hd_max_bytes_one_host = t.hd_max_bytes;
  t.hd_min_ranks = 2;
  t.chunk_bytes = 4096;  // several ring chunks per segment
  return t;
}

}  // namespace

namespace {

void every_algorithm(Mesh mesh, int max_ranks) {
  const std::vector<size_t> counts = {1, 2, 3, 5, 7, 8, 9, 31, 1000, 4097, 30011};
  for (int n = 2; n <= max_ranks; ++n)
    for (AllreduceAlgorithm a :
         {AllreduceAlgorithm::kDirect, AllreduceAlgorithm::kHalvingDoubling, AllreduceAlgorithm::kRing}) {
      INFO(n << " ranks, " << (mesh == Mesh::kSparse ? "sparse" : "full") << " mesh, " << collective::algorithm_name(a));
      std::vector<std::vector<std::vector<uint8_t>>> results(n);
      std::vector<collective::CommStats> stats(n);
      CommunicatorOptions o = test::fast_options(20000);
      o.mesh = mesh;
      test::run_ranks(
          n,
          [&](int rank, TcpCommunicator& comm) {
            comm.set_tuning(forcing(comm.tuning(), a));
            test::allreduce_every_op(n, rank, comm, counts, results[rank]);
            // Fused spans cutting through the halves and segments.
            std::vector<std::vector<float>> t;
            std::vector<collective::Span> spans;
            for (size_t k = 0; k < 9; ++k) t.emplace_back(k * 113 + (k % 2), static_cast<float>(rank + k));
            for (auto& v : t) spans.push_back({v.data(), v.size() * sizeof(float)});
            comm.allreduce_spans(spans, DataType::kFloat32, ReduceOp::kSum);
            for (size_t k = 0; k < t.size(); ++k)
              for (float x : t[k])
                if (x != static_cast<float>(n * (n - 1) / 2 + n * static_cast<int>(k))) TFAIL("span " << k);
            stats[rank] = comm.stats();
          },
          o);
      for (int r = 1; r < n; ++r) CHECK(results[r] == results[0]);
      const uint64_t runs = counts.size() * std::size(test::kAllTypes) * std::size(test::kAllOps) + 1;
      if (a == AllreduceAlgorithm::kDirect && mesh == Mesh::kSparse)  // no direct exchange on the sparse mesh
        CHECK(stats[0].recursive_doubling_allreduces == runs);
      if (a == AllreduceAlgorithm::kDirect && mesh != Mesh::kSparse) CHECK(stats[0].eager_allreduces == runs);
      if (a == AllreduceAlgorithm::kHalvingDoubling) CHECK(stats[0].halving_doubling_allreduces == runs);
      if (a == AllreduceAlgorithm::kRing) CHECK(stats[0].ring_allreduces == runs);
    }
}

}  // namespace

TEST_CASE("algorithms: direct, halving-doubling and ring equal the reference at 2-5 ranks", "[collective][algorithm]") {
  every_algorithm(Mesh::kFull, 5);
}

TEST_CASE("algorithms: recursive doubling, halving-doubling and ring on the sparse mesh at 2-9 ranks",
          "[collective][algorithm][sparse]") {
  every_algorithm(Mesh::kSparse, 9);
}

TEST_CASE("algorithms: the automatic choice by size and ranks", "[collective][algorithm]") {
  AlgorithmTuning t;
  using A = AllreduceAlgorithm;
  CHECK(collective::choose_allreduce(4096, 4, t) == A::kDirect);
  CHECK(collective::choose_allreduce(t.eager_bytes, 2, t) == A::kDirect);
  CHECK(collective::choose_allreduce(t.eager_bytes + 4, 2, t) == A::kHalvingDoubling);  // 2 ranks: at every size
  CHECK(collective::choose_allreduce(size_t{1} << 30, 2, t) == A::kHalvingDoubling);
  CHECK(collective::choose_allreduce(t.eager_bytes + 4, 3, t) == A::kHalvingDoubling);
  // The direct exchange sends (n-1) copies: at many ranks it stops earlier.
  CHECK(collective::choose_allreduce(t.direct_total_bytes / 3, 4, t) == A::kDirect);
  CHECK(collective::choose_allreduce(t.direct_total_bytes / 3 + 4, 4, t) == A::kHalvingDoubling);
  CHECK(collective::choose_allreduce(t.direct_total_bytes / 8, 16, t) == A::kHalvingDoubling);
  CHECK(collective::choose_allreduce(t.hd_max_bytes, 4, t) == A::kHalvingDoubling);
  CHECK(collective::choose_allreduce(t.hd_max_bytes + 4, 4, t) == A::kRing);
  CHECK(collective::choose_allreduce(t.hd_max_bytes / 2, 5, t) == A::kHalvingDoubling);  // not a power of two
  CHECK(collective::choose_allreduce(t.hd_max_bytes / 2 + 4, 5, t) == A::kRing);
  AlgorithmTuning ring2 = t;  // the 2-rank limit is its own
  ring2.hd_max_bytes_2_ranks = 1 << 20;
  CHECK(collective::choose_allreduce(1 << 20, 2, ring2) == A::kHalvingDoubling);
  CHECK(collective::choose_allreduce((1 << 20) + 4, 2, ring2) == A::kRing);
  CHECK(collective::choose_allreduce((1 << 20) + 4, 4, ring2) == A::kHalvingDoubling);
  // Every rank on one host (loopback addresses): halving-doubling at every size at a power of two.
  CHECK(collective::choose_allreduce(t.hd_max_bytes + 4, 4, t, true) == A::kHalvingDoubling);
  CHECK(collective::choose_allreduce(size_t{1} << 30, 8, t, true) == A::kHalvingDoubling);
  CHECK(collective::choose_allreduce(t.hd_max_bytes / 2 + 4, 5, t, true) == A::kRing);  // not a power of two
  // The sparse mesh: recursive doubling instead of the direct exchange, while bytes * ceil(log2 n)
  // stays within direct_total_bytes; then the same choice as on the full mesh.
  CHECK(collective::choose_allreduce(4096, 1024, t, false, true) == A::kRecursiveDoubling);
  CHECK(collective::choose_allreduce(t.direct_total_bytes / 10, 1024, t, false, true) == A::kRecursiveDoubling);
  CHECK(collective::choose_allreduce(t.direct_total_bytes / 10 + 4, 1024, t, false, true) == A::kHalvingDoubling);
  CHECK(collective::choose_allreduce(t.eager_bytes, 8, t, false, true) == A::kRecursiveDoubling);
  CHECK(collective::choose_allreduce(t.eager_bytes + 4, 8, t, false, true) == A::kHalvingDoubling);
  CHECK(collective::choose_allreduce(t.hd_max_bytes + 4, 64, t, false, true) == A::kRing);
  CHECK(collective::is_loopback_address("127.0.0.1:4000"));
  CHECK(collective::is_loopback_address("127.3.2.1:1"));
  CHECK(collective::is_loopback_address("localhost:80"));
  CHECK(collective::is_loopback_address("[::1]:80"));
  CHECK(collective::is_loopback_address("::1"));
  CHECK_FALSE(collective::is_loopback_address("10.0.0.2:4000"));
  CHECK_FALSE(collective::is_loopback_address("192.168.1.7"));
  CHECK_FALSE(collective::is_loopback_address("[fe80::1]:80"));
  CHECK_FALSE(collective::is_loopback_address("example.org:80"));
}

TEST_CASE("algorithms: ranks whose tunings pick different algorithms fail with CommError", "[collective][algorithm]") {
  std::vector<std::string> got(3);
  test::run_ranks(3, [&](int rank, TcpCommunicator& comm) {
    AlgorithmTuning t = comm.tuning();
    if (rank == 2) t.hd_max_bytes = 0;  // ring where the others use halving-doubling
    comm.set_tuning(t);
    std::vector<float> v(100000, 1.0f);
    try {
      comm.allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
      got[rank] = "no error";
    } catch (const MismatchError& e) {
      got[rank] = std::string("MismatchError: ") + e.what();
    } catch (const CommError& e) {
      got[rank] = e.what();
    }
  });
  for (const auto& g : got) {
    INFO(g);
    CHECK(g.find("AlgorithmTuning differs") != std::string::npos);
  }
}

TEST_CASE("algorithms: ranks on loopback addresses know they share one host", "[collective][algorithm]") {
  std::vector<int> one_host(4, -1);
  test::run_ranks(4, [&](int rank, TcpCommunicator& comm) { one_host[rank] = comm.one_host() ? 1 : 0; });
  CHECK(one_host == std::vector<int>(4, 1));
}
