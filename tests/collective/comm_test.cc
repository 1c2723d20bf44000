// TcpCommunicator correctness: every op x dtype (uint8 included; reference.h) against a reference
// at 1-4 ranks (eager and ring paths, odd / tiny / non-divisible / zero counts), broadcast from
// every root, allgatherv with per-rank counts, barrier, each mismatch kind, and foreign connections
// at the listening port.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "collective/socket.h"
#include "harness.h"
#include "reference.h"

using namespace edl;
using edl::collective::TcpCommunicator;

namespace {

void check_allreduce_all(int n, const std::vector<size_t>& counts) {
  // Every rank returns its results; after the run all ranks are compared bitwise.
  std::vector<std::vector<std::vector<uint8_t>>> results(n);
  test::run_ranks(n, [&](int rank, TcpCommunicator& comm) {
    for (size_t count : counts)
      for (DataType dt : test::kAllTypes)
        for (ReduceOp op : test::kAllOps) {
          const size_t es = dtype_size(dt);
          std::vector<uint8_t> buf(count * es + 16, 0xAB);  // 16 guard bytes
          for (size_t i = 0; i < count; ++i) test::ref_put(buf.data(), i, dt, test::ref_input(rank, i, dt));
          comm.allreduce(count ? buf.data() : nullptr, count, dt, op);
          for (size_t g = count * es; g < buf.size(); ++g)
            if (buf[g] != 0xAB) TFAIL("allreduce wrote past the buffer");
          for (size_t i = 0; i < count; ++i) {
            double want = test::ref_result(n, i, op, dt), got = test::ref_get(buf.data(), i, dt);
            if (!test::ref_close(got, want, dt)) {
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
    t.hd_max_bytes = t.hd_max_bytes_one_host = 0;  // the ring at every size
    t.shm_eager_bytes = 0;   // test_collective_shm: staged rounds
    t.window_bytes = 40000;  // 50001 floats run as several consecutive rings
    t.window_rank_bytes = 0;
    comm.set_tuning(t);
    for (size_t count : {1ul, 2ul, 3ul, 4ul, 7ul, 3001ul, 50001ul}) {
      std::vector<float> v(count);
      for (size_t i = 0; i < count; ++i) v[i] = static_cast<float>(test::ref_input(rank, i, DataType::kFloat32));
      comm.allreduce(v.data(), count, DataType::kFloat32, ReduceOp::kSum);
      for (size_t i = 0; i < count; ++i) TREQUIRE(v[i] == static_cast<float>(test::ref_result(3, i, ReduceOp::kSum, DataType::kFloat32)));
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
      t.window_rank_bytes = 0;
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
      test::check_gathered(out, counts, n, [](int r) { return static_cast<size_t>(r) * 3; });
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
