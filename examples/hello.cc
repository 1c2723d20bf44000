// edl-hello: runs every collective once across the world and verifies the results.
//   edl-run -np 3 build/examples/edl-hello
// Prints one line per rank and exits non-zero if any result is wrong.
#include <edl/edl.h>

#include <cmath>
#include <cstdio>
#include <numeric>
#include <vector>

int main() {
  try {
    edl::init();
    const int r = edl::rank();
    const int n = edl::size();
    int wrong = 0;

    // allreduce (sum) of float32: element i holds rank + i on each rank.
    std::vector<float> f(1 << 16);
    for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>(r + static_cast<int>(i % 7));
    edl::allreduce(f.data(), f.size(), edl::ReduceOp::kSum);
    for (size_t i = 0; i < f.size(); ++i) {
      float expect = static_cast<float>(n * (n - 1) / 2 + n * static_cast<int>(i % 7));
      if (f[i] != expect) ++wrong;
    }

    // allreduce (max) of int64.
    std::vector<int64_t> m(1000, static_cast<int64_t>(r) * 10);
    edl::allreduce(m.data(), m.size(), edl::ReduceOp::kMax);
    for (auto v : m) wrong += v != static_cast<int64_t>(n - 1) * 10;

    // broadcast from the last rank.
    std::vector<double> b(257, r == n - 1 ? 3.25 : -1.0);
    edl::broadcast(b.data(), b.size(), n - 1);
    for (auto v : b) wrong += v != 3.25;

    // allgather with per-rank sizes: rank k contributes k+1 int32 values equal to k.
    std::vector<int32_t> mine(static_cast<size_t>(r + 1), r);
    std::vector<uint8_t> out;
    std::vector<size_t> counts;
    edl::allgather(mine.data(), mine.size(), edl::DataType::kInt32, out, &counts);
    const int32_t* all = reinterpret_cast<const int32_t*>(out.data());
    size_t pos = 0;
    for (int k = 0; k < n; ++k) {
      wrong += counts.size() != static_cast<size_t>(n) || counts[k] != static_cast<size_t>(k + 1);
      for (int j = 0; j <= k; ++j) wrong += all[pos++] != k;
    }
    edl::barrier();

    // the total of wrong elements over all ranks, so every rank reports the same verdict.
    int64_t total_wrong = wrong;
    edl::allreduce(&total_wrong, 1, edl::ReduceOp::kSum);
    std::printf("rank %d of %d: allreduce/broadcast/allgather/barrier %s (%lld wrong elements in the world)\n", r, n,
                total_wrong == 0 ? "verified" : "FAILED", static_cast<long long>(total_wrong));
    edl::shutdown();
    return total_wrong == 0 ? 0 : 1;
  } catch (const edl::Error& e) {
    std::fprintf(stderr, "edl-hello: %s\n", e.what());
    return 1;
  }
}
