// The TCP path's allreduce algorithms (direct exchange, halving-doubling, ring), each forced through
// AlgorithmTuning at 2-5 ranks (powers of two and not), every dtype x op, sizes from 1 element to
// non-divisible large counts, fused spans: results equal the reference and are bitwise identical on
// every rank; the stats prove which algorithm ran. Also the automatic choice by size and ranks.
#include <catch2/catch.hpp>
#include <cmath>

#include "harness.h"

using namespace edl;
using edl::collective::AlgorithmTuning;
using edl::collective::AllreduceAlgorithm;
using edl::collective::TcpCommunicator;

namespace {

const DataType kTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kInt32,
                           DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16, DataType::kUInt8};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};

// Values in {-1, 0, 1, 2} (uint8: {0, 1, 2}): sums and products of up to 5 are exact everywhere.
double input(int rank, size_t i, DataType dt) {
  const int v = static_cast<int>((i * 5 + static_cast<size_t>(rank) * 3) % 4) - 1;
  return dt == DataType::kUInt8 ? std::abs(v) : v;
}

void put(void* b, size_t i, DataType dt, double v) {
  switch (dt) {
    case DataType::kFloat32: static_cast<float*>(b)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(b)[i] = v; break;
    case DataType::kInt32: static_cast<int32_t*>(b)[i] = static_cast<int32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(b)[i] = static_cast<int64_t>(v); break;
    case DataType::kFloat16: static_cast<uint16_t*>(b)[i] = float_to_half(static_cast<float>(v)); break;
    case DataType::kBFloat16: static_cast<uint16_t*>(b)[i] = float_to_bfloat16(static_cast<float>(v)); break;
    case DataType::kUInt8: static_cast<uint8_t*>(b)[i] = static_cast<uint8_t>(v); break;
  }
}

double get(const void* b, size_t i, DataType dt) {
  switch (dt) {
    case DataType::kFloat32: return static_cast<const float*>(b)[i];
    case DataType::kFloat64: return static_cast<const double*>(b)[i];
    case DataType::kInt32: return static_cast<const int32_t*>(b)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(b)[i]);
    case DataType::kFloat16: return half_to_float(static_cast<const uint16_t*>(b)[i]);
    case DataType::kBFloat16: return bfloat16_to_float(static_cast<const uint16_t*>(b)[i]);
    case DataType::kUInt8: return static_cast<const uint8_t*>(b)[i];
  }
  return 0;
}

double reference(int n, size_t i, ReduceOp op, DataType dt) {
  double acc = input(0, i, dt);
  for (int r = 1; r < n; ++r) {
    const double v = input(r, i, dt);
    if (op == ReduceOp::kSum || op == ReduceOp::kAverage) acc += v;
    if (op == ReduceOp::kMin) acc = std::min(acc, v);
    if (op == ReduceOp::kMax) acc = std::max(acc, v);
    if (op == ReduceOp::kProduct) acc *= v;
  }
  if (op != ReduceOp::kAverage) return acc;
  if (dt == DataType::kInt32 || dt == DataType::kInt64 || dt == DataType::kUInt8) return std::trunc(acc / n);
  return acc / n;
}

bool close_enough(double got, double want, DataType dt) {
  const double tol = dt == DataType::kFloat16 ? 1e-3 : dt == DataType::kBFloat16 ? 8e-3 : dt == DataType::kFloat32 ? 1e-6 : 0;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

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

TEST_CASE("algorithms: direct, halving-doubling and ring equal the reference at 2-5 ranks", "[collective][algorithm]") {
  const std::vector<size_t> counts = {1, 2, 3, 5, 7, 8, 9, 31, 1000, 4097, 30011};
  for (int n = 2; n <= 5; ++n)
    for (AllreduceAlgorithm a :
         {AllreduceAlgorithm::kDirect, AllreduceAlgorithm::kHalvingDoubling, AllreduceAlgorithm::kRing}) {
      INFO(n << " ranks, " << collective::algorithm_name(a));
      std::vector<std::vector<std::vector<uint8_t>>> results(n);
      std::vector<collective::CommStats> stats(n);
      test::run_ranks(
          n,
          [&](int rank, TcpCommunicator& comm) {
            comm.set_tuning(forcing(comm.tuning(), a));
            for (size_t count : counts)
              for (DataType dt : kTypes)
                for (ReduceOp op : kOps) {
                  const size_t es = dtype_size(dt);
                  std::vector<uint8_t> buf(count * es + 16, 0xCD);
                  for (size_t i = 0; i < count; ++i) put(buf.data(), i, dt, input(rank, i, dt));
                  comm.allreduce(buf.data(), count, dt, op);
                  for (size_t g = count * es; g < buf.size(); ++g)
                    if (buf[g] != 0xCD) TFAIL("wrote past the buffer");
                  for (size_t i = 0; i < count; ++i)
                    if (!close_enough(get(buf.data(), i, dt), reference(n, i, op, dt), dt))
                      TFAIL("count " << count << " " << dtype_name(dt) << " " << op_name(op) << " element " << i
                                     << ": got " << get(buf.data(), i, dt) << " want " << reference(n, i, op, dt));
                  buf.resize(count * es);
                  results[rank].push_back(std::move(buf));
                }
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
          test::fast_options(20000));
      for (int r = 1; r < n; ++r) CHECK(results[r] == results[0]);
      const uint64_t runs = counts.size() * std::size(kTypes) * std::size(kOps) + 1;
      if (a == AllreduceAlgorithm::kDirect) CHECK(stats[0].eager_allreduces == runs);
      if (a == AllreduceAlgorithm::kHalvingDoubling) CHECK(stats[0].halving_doubling_allreduces == runs);
      if (a == AllreduceAlgorithm::kRing) CHECK(stats[0].ring_allreduces == runs);
    }
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
