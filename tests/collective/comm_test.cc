// TcpCommunicator correctness: every op x dtype against a reference at 1-4 ranks (eager and ring
// paths, odd / tiny / non-divisible / zero counts), broadcast from every root, allgatherv with
// per-rank counts, barrier, each mismatch kind, and foreign connections at the listening port.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "collective/socket.h"
#include "harness.h"

using namespace edl;
using edl::collective::TcpCommunicator;

namespace {

const DataType kTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kInt32,
                           DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};

// Small integers: sums and products of up to 4 of them are exact in every dtype.
double input_value(int rank, size_t i) { return static_cast<double>(static_cast<int>((i * 7 + rank * 3) % 11) - 5); }

void store_value(void* buf, size_t i, DataType dt, double v) {
  switch (dt) {
    case DataType::kFloat32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(buf)[i] = v; break;
    case DataType::kInt32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v); break;
    case DataType::kFloat16: static_cast<uint16_t*>(buf)[i] = float_to_half(static_cast<float>(v)); break;
    case DataType::kBFloat16: static_cast<uint16_t*>(buf)[i] = float_to_bfloat16(static_cast<float>(v)); break;
    default: break;
  }
}

double load_value(const void* buf, size_t i, DataType dt) {
  switch (dt) {
    case DataType::kFloat32: return static_cast<const float*>(buf)[i];
    case DataType::kFloat64: return static_cast<const double*>(buf)[i];
    case DataType::kInt32: return static_cast<const int32_t*>(buf)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
    case DataType::kFloat16: return half_to_float(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kBFloat16: return bfloat16_to_float(static_cast<const uint16_t*>(buf)[i]);
    default: return 0;
  }
}

double expected(int n, size_t i, ReduceOp op, DataType dt) {
  double acc = input_value(0, i);
  for (int r = 1; r < n; ++r) {
    double v = input_value(r, i);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage: acc += v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
      case ReduceOp::kProduct: acc *= v; break;
    }
  }
  if (op == ReduceOp::kAverage) {
    if (dt == DataType::kInt32 || dt == DataType::kInt64) return std::trunc(acc / n);
    return acc / n;
  }
  return acc;
}

double tolerance(DataType dt) {
  switch (dt) {
    case DataType::kFloat16: return 4e-3;
    case DataType::kBFloat16: return 3e-2;
    case DataType::kFloat32: return 1e-6;
    default: return 1e-12;
  }
}

void check_allreduce_all(int n, const std::vector<size_t>& counts) {
  // Every rank returns its results; after the run all ranks are compared bitwise.
  std::vector<std::vector<std::vector<uint8_t>>> results(n);
  test::run_ranks(n, [&](int rank, TcpCommunicator& comm) {
    for (size_t count : counts)
      for (DataType dt : kTypes)
        for (ReduceOp op : kOps) {
          const size_t es = dtype_size(dt);
          std::vector<uint8_t> buf(count * es + 16, 0xAB);  // 16 guard bytes
          for (size_t i = 0; i < count; ++i) store_value(buf.data(), i, dt, input_value(rank, i));
          comm.allreduce(count ? buf.data() : nullptr, count, dt, op);
          for (size_t g = count * es; g < buf.size(); ++g)
            if (buf[g] != 0xAB) TFAIL("allreduce wrote past the buffer");
          for (size_t i = 0; i < count; ++i) {
            double want = expected(n, i, op, dt), got = load_value(buf.data(), i, dt);
            if (std::fabs(got - want) > tolerance(dt) * std::max(1.0, std::fabs(want))) {
              TFAIL("n=" << n << " count=" << count << " " << dtype_name(dt) << " " << op_name(op) << " element " << i
                        << ": got " << got << " want " << want);
            }
          }
          buf.resize(count * es);
          results[rank].push_back(std::move(buf));
        }
  });
  for (int r = 1; r < n; ++r) TREQUIRE(results[r] == results[0]);  // bitwise identical on every rank
}

}  // namespace

TEST_CASE("allreduce: every op x dtype, eager path, 1-4 ranks", "[collective]") {
  for (int n = 1; n <= 4; ++n) {
    INFO("ranks " << n);
    check_allreduce_all(n, {0, 1, 2, 3, 5, 1001});
  }
}

TEST_CASE("allreduce: every op x dtype, ring path with non-divisible counts", "[collective]") {
  for (int n = 2; n <= 4; ++n) {
    INFO("ranks " << n);
    check_allreduce_all(n, {100003});
  }
}

TEST_CASE("allreduce: small chunks exercise the ring pipeline across many chunks", "[collective]") {
  test::run_ranks(3, [](int rank, TcpCommunicator& comm) {
    auto t = comm.tuning();
    t.chunk_bytes = 4096;
    t.eager_bytes = 0;
    t.hd_max_bytes = 0;      // the ring at every size
    t.shm_eager_bytes = 0;   // test_collective_shm: staged rounds
    t.window_bytes = 40000;  // 50001 floats run as several consecutive rings
    comm.set_tuning(t);
    for (size_t count : {1ul, 2ul, 3ul, 4ul, 7ul, 3001ul, 50001ul}) {
      std::vector<float> v(count);
      for (size_t i = 0; i < count; ++i) v[i] = static_cast<float>(input_value(rank, i));
      comm.allreduce(v.data(), count, DataType::kFloat32, ReduceOp::kSum);
      for (size_t i = 0; i < count; ++i) TREQUIRE(v[i] == static_cast<float>(expected(3, i, ReduceOp::kSum, DataType::kFloat32)));
    }
    TREQUIRE(comm.stats().ring_allreduces == 7);
  });
}

TEST_CASE("allreduce_spans: a fused allreduce over many tensors equals per-tensor results", "[collective]") {
  test::run_ranks(2, [](int rank, TcpCommunicator& comm) {
    for (size_t eager : {size_t{1} << 20, size_t{0}}) {
      auto t = comm.tuning();
      t.eager_bytes = eager;
      t.chunk_bytes = 1000 * 4;
      t.window_bytes = 3000 * 4;  // windows cut through tensors
      comm.set_tuning(t);
      std::vector<std::vector<float>> tensors;
      std::vector<collective::Span> spans;
      for (size_t k = 0; k < 20; ++k) tensors.emplace_back(k * 37 + (k % 3 == 0 ? 0 : 1), static_cast<float>(rank + k));
      for (auto& t2 : tensors) spans.push_back({t2.data(), t2.size() * 4});
      comm.allreduce_spans(spans, DataType::kFloat32, ReduceOp::kAverage);
      for (size_t k = 0; k < tensors.size(); ++k)
        for (float x : tensors[k]) TREQUIRE(x == Approx(0.5 + static_cast<double>(k)));
    }
  });
}

TEST_CASE("broadcast from every root and allgatherv with per-rank counts", "[collective]") {
  for (int n = 1; n <= 4; ++n) {
    test::run_ranks(n, [n](int rank, TcpCommunicator& comm) {
      for (int root = 0; root < n; ++root)
        for (size_t count : {0ul, 1ul, 777ul, 300000ul}) {
          std::vector<int64_t> v(count, rank == root ? 1000 + root : -1);
          for (size_t i = 0; i < count; ++i)
            if (rank == root) v[i] += static_cast<int64_t>(i);
          comm.broadcast(v.data(), count, DataType::kInt64, root);
          for (size_t i = 0; i < count; ++i) TREQUIRE(v[i] == 1000 + root + static_cast<int64_t>(i));
        }
      // allgatherv: rank r contributes r*3 doubles (rank 0 contributes nothing).
      std::vector<double> mine(static_cast<size_t>(rank) * 3, rank + 0.5);
      std::vector<uint8_t> out;
      std::vector<size_t> counts;
      comm.allgatherv(mine.data(), mine.size(), DataType::kFloat64, out, &counts);
      TREQUIRE(counts.size() == static_cast<size_t>(n));
      size_t at = 0;
      for (int r = 0; r < n; ++r) {
        TREQUIRE(counts[r] == static_cast<size_t>(r) * 3);
        for (size_t i = 0; i < counts[r]; ++i) {
          double x;
          std::memcpy(&x, out.data() + (at + i) * 8, 8);
          TREQUIRE(x == r + 0.5);
        }
        at += counts[r];
      }
      TREQUIRE(out.size() == at * 8);
      comm.barrier();
    });
  }
}

TEST_CASE("mismatches: every rank gets the same MismatchError and the communicator stays usable", "[collective]") {
  for (int n : {2, 3}) {
    for (size_t base : {8ul, 100000ul}) {  // eager and ring sizes
      std::vector<std::vector<std::string>> messages(n);
      test::run_ranks(n, [&](int rank, TcpCommunicator& comm) {
        const bool odd = rank == n - 1;
        std::vector<float> f(base * 2 + 64, 1.0f);
        auto expect_mismatch = [&](const std::function<void()>& call, const char* needle) {
          try {
            call();
            TFAIL("no MismatchError");
          } catch (const MismatchError& e) {
            std::string m = e.what();
            if (m.find(needle) == std::string::npos) TFAIL("message '" << m << "' lacks '" << needle << "'");
            messages[rank].push_back(m);
          }
        };
        expect_mismatch([&] { comm.allreduce(f.data(), odd ? base / 2 : base, DataType::kFloat32, ReduceOp::kSum); },
                        "allreduce count mismatch: rank 0 has");
        expect_mismatch(
            [&] { comm.allreduce(f.data(), base, odd ? DataType::kInt32 : DataType::kFloat32, ReduceOp::kSum); },
            "allreduce dtype mismatch: rank 0 has float32");
        expect_mismatch([&] { comm.allreduce(f.data(), base, DataType::kFloat32, odd ? ReduceOp::kMax : ReduceOp::kSum); },
                        "allreduce op mismatch: rank 0 uses sum");
        expect_mismatch([&] { comm.broadcast(f.data(), base, DataType::kFloat32, odd ? 1 : 0); },
                        "broadcast root mismatch: rank 0 uses root 0");
        expect_mismatch(
            [&] {
              if (odd) comm.barrier();
              else comm.allreduce(f.data(), base, DataType::kFloat32, ReduceOp::kSum);
            },
            "collective mismatch: rank 0 called allreduce");
        expect_mismatch(
            [&] {
              std::vector<uint8_t> out;
              comm.allgatherv(f.data(), base, odd ? DataType::kFloat64 : DataType::kFloat32, out);
            },
            "allgather dtype mismatch");
        // Nothing was written past any buffer and the streams are still in sync.
        for (size_t i = 0; i < f.size(); ++i) TREQUIRE(f[i] == 1.0f);
        std::vector<float> ok(base, static_cast<float>(rank));
        comm.allreduce(ok.data(), base, DataType::kFloat32, ReduceOp::kSum);
        TREQUIRE(ok[base - 1] == static_cast<float>(n * (n - 1) / 2));
      });
      for (int r = 1; r < n; ++r) TREQUIRE(messages[r] == messages[0]);
    }
  }
}

TEST_CASE("invalid arguments are rejected locally", "[collective]") {
  test::run_ranks(1, [](int, TcpCommunicator& comm) {
    REQUIRE_THROWS_AS(comm.allreduce(nullptr, 4, DataType::kFloat32, ReduceOp::kSum), InvalidArgument);
    REQUIRE_THROWS_AS(comm.broadcast(nullptr, 0, DataType::kFloat32, 1), InvalidArgument);
    float x = 3;
    REQUIRE_THROWS_AS(comm.allreduce(&x, 1, static_cast<DataType>(99), ReduceOp::kSum), InvalidArgument);
    REQUIRE_THROWS_AS(comm.allreduce(&x, 1, DataType::kFloat32, static_cast<ReduceOp>(42)), InvalidArgument);
    comm.allreduce(&x, 1, DataType::kFloat32, ReduceOp::kAverage);
    TREQUIRE(x == 3);
  });
  REQUIRE_THROWS_AS(Communicator::create(make_memory_store(), "p/", 2, 2), InvalidArgument);
}
