// Device collectives on a real GPU (label gpu): every dtype x op at 1-4 ranks against the host
// path's results (bitwise: the inputs are small integers, so every path's arithmetic is exact),
// broadcast and allgather, fusion of many odd-sized tensors through a small fusion buffer, fp16
// compression, stream ordering at both ends, held references, and the host-staged transport.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>

#include "edl/collectives.h"
#include "gpu_harness.h"

using namespace edl;
using namespace edl::test;
using namespace edl::test::gpu;

namespace {

const std::vector<size_t> kCounts = {0, 1, 5, 1031, 40000};

std::vector<uint8_t> inputs(int rank, size_t count, DataType dt) {
  std::vector<uint8_t> h(count * dtype_size(dt) + 1);
  for (size_t i = 0; i < count; ++i) ref_put(h.data(), i, dt, ref_input(rank, i, dt));
  h.resize(count * dtype_size(dt));
  return h;
}

// Every dtype x op: the device result equals the host path's byte for byte and the reference.
int dtype_op_rank(const std::string& dir, int rank, int n, const std::string& want_mode) {
  start_runtime(dir, rank_config());
  install_generation(1, rank, n);
  std::string reason;
  const std::string mode = edl::cuda::generation_mode(&reason);
  if (mode != want_mode) TFAIL("generation mode " << mode << " (" << reason << "), expected " << want_mode);
  cudaStream_t s;
  cuda_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  constexpr size_t kGuard = 64;
  int k = 0;
  for (size_t count : kCounts)
    for (DataType dt : kAllTypes)
      for (ReduceOp op : kAllOps) {
        const size_t bytes = count * dtype_size(dt);
        std::vector<uint8_t> host = inputs(rank, count, dt);
        DeviceBuffer d(bytes + kGuard);
        cuda_ok(cudaMemset(d.p, 0xAB, bytes + kGuard), "cudaMemset");
        if (bytes) d.upload(host.data(), bytes);  // synchronizes: the memset and the upload are done
        else cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        const std::string name = "t" + std::to_string(k++);
        edl::cuda::allreduce(count ? d.p : nullptr, count, dt, reinterpret_cast<edl::cuda::Stream>(s), op, name);
        edl::allreduce(count ? host.data() : nullptr, count, dt, op, name + ".host");
        const auto got = d.download(bytes + kGuard);
        for (size_t g = bytes; g < got.size(); ++g)
          if (got[g] != 0xAB) TFAIL("device allreduce wrote past the buffer: " << dtype_name(dt) << " " << op_name(op));
        if (std::memcmp(got.data(), host.data(), bytes) != 0)
          TFAIL("device and host results differ: n=" << n << " count=" << count << " " << dtype_name(dt) << " "
                                                     << op_name(op));
        for (size_t i = 0; i < count; ++i)
          if (!ref_close(ref_get(got.data(), i, dt), ref_result(n, i, op, dt), dt))
            TFAIL("n=" << n << " " << dtype_name(dt) << " " << op_name(op) << " element " << i << ": got "
                       << ref_get(got.data(), i, dt) << " want " << ref_result(n, i, op, dt));
      }
  return 0;
}

void run_ranks_ok(int n, const std::function<int(const std::string&, int)>& fn, const std::vector<std::string>& env = {},
                  std::chrono::seconds timeout = std::chrono::seconds(240)) {
  Ranks ranks;
  const std::string dir = ranks.dir;
  ranks.start(n, [&, dir](int r) { return fn(dir, r); }, env);
  const auto st = ranks.wait(timeout);
  INFO(ranks.logs());
  for (int r = 0; r < n; ++r) CHECK(st[static_cast<size_t>(r)] == 0);
}

}  // namespace

TEST_CASE("gpu: every dtype x op at 1-4 ranks equals the host path bitwise (NCCL)", "[gpu]") {
  EDL_GPU_TEST_OR_SKIP();
  for (int n = 1; n <= 4; ++n) {
    INFO("ranks: " << n);
    run_ranks_ok(n, [n](const std::string& dir, int r) { return dtype_op_rank(dir, r, n, n == 1 ? "local" : "init"); });
  }
}

TEST_CASE("gpu: every dtype x op at 2 and 3 ranks over the host-staged path (EDL_GPU_TRANSPORT=host)", "[gpu]") {
  EDL_GPU_TEST_OR_SKIP();
  for (int n = 2; n <= 3; ++n) {
    INFO("ranks: " << n);
    run_ranks_ok(n, [n](const std::string& dir, int r) { return dtype_op_rank(dir, r, n, "host"); },
                 {"EDL_GPU_TRANSPORT=host"});
  }
}

namespace {

// Broadcast from every root and allgather with counts that differ, bitwise; an output too short on
// one rank fails every rank with InvalidArgument and the generation goes on.
int bcast_gather_rank(const std::string& dir, int rank, int n) {
  start_runtime(dir, rank_config());
  install_generation(1, rank, n);
  auto s = reinterpret_cast<edl::cuda::Stream>(0);
  for (int root = 0; root < n; ++root)
    for (DataType dt : kAllTypes) {
      const size_t count = 777;
      auto mine = inputs(rank + 10 * root, count, dt), want = inputs(root + 10 * root, count, dt);
      DeviceBuffer d(mine.size());
      d.upload(mine.data(), mine.size());
      edl::cuda::broadcast(d.p, count, dt, root, s, "b" + std::to_string(root) + dtype_name(dt));
      if (d.download(mine.size()) != want) TFAIL("broadcast from " << root << " of " << dtype_name(dt) << " differs");
    }
  for (size_t base : {size_t{0}, size_t{1000}}) {
    const size_t count = base + static_cast<size_t>(rank) * 3;  // differ per rank (equal when base 0 and n 1)
    auto mine = inputs(rank, count, DataType::kInt32);
    std::vector<uint8_t> want;
    size_t total = 0;
    for (int r = 0; r < n; ++r) {
      auto part = inputs(r, base + static_cast<size_t>(r) * 3, DataType::kInt32);
      want.insert(want.end(), part.begin(), part.end());
      total += base + static_cast<size_t>(r) * 3;
    }
    DeviceBuffer in(mine.size()), out(want.size());
    if (!mine.empty()) in.upload(mine.data(), mine.size());
    std::vector<size_t> counts;
    edl::cuda::allgather(in.p, count, DataType::kInt32, out.p, total, s, &counts, "g" + std::to_string(base));
    if (out.download(want.size()) != want) TFAIL("allgather (base " << base << ") differs");
    if (counts.size() != static_cast<size_t>(n)) TFAIL("allgather counts: " << counts.size());
    // Equal counts (ncclAllGather).
    DeviceBuffer eq_in(400), eq_out(400 * static_cast<size_t>(n));
    auto eq = inputs(rank, 100, DataType::kFloat32);
    eq_in.upload(eq.data(), eq.size());
    edl::cuda::allgather(eq_in.p, 100, DataType::kFloat32, eq_out.p, 100 * static_cast<size_t>(n), s, nullptr,
                         "eq" + std::to_string(base));
    const auto got = eq_out.download(400 * static_cast<size_t>(n));
    for (int r = 0; r < n; ++r)
      if (std::memcmp(got.data() + 400 * r, inputs(r, 100, DataType::kFloat32).data(), 400) != 0)
        TFAIL("equal-count allgather differs at rank " << r);
  }
  if (n > 1) {
    DeviceBuffer in(40), out(40 * static_cast<size_t>(n));
    const size_t room = rank == 1 ? 1 : 10 * static_cast<size_t>(n);
    TREQUIRE_THROWS_AS(edl::cuda::allgather(in.p, 10, DataType::kInt32, out.p, room, s, nullptr, "short"), InvalidArgument);
    std::vector<float> one(8, 1.0f);
    DeviceBuffer d(32);
    d.upload(one.data(), 32);
    edl::cuda::allreduce(d.p, 8, DataType::kFloat32, s, ReduceOp::kSum, "after-short");
    auto back = d.download(32);
    float f;
    std::memcpy(&f, back.data(), 4);
    if (f != static_cast<float>(n)) TFAIL("allreduce after a refused allgather: " << f);
  }
  return 0;
}

}  // namespace

TEST_CASE("gpu: broadcast from every root, allgather with equal and differing counts, a short output refused",
          "[gpu]") {
  EDL_GPU_TEST_OR_SKIP();
  for (int n : {1, 3}) {
    INFO("ranks: " << n);
    run_ranks_ok(n, [n](const std::string& dir, int r) { return bcast_gather_rank(dir, r, n); });
  }
}

namespace {

// 60 odd-sized tensors of four dtypes and a float16 one whose float32 form is larger than the
// 64 KiB fusion buffer (cut into passes), enqueued at once (fused by the engine, packed through the
// buffer), and fp16 / bf16 compressed averages of float32 tensors.
int fusion_rank(const std::string& dir, int rank, int n) {
  Config c = rank_config();
  c.fusion_threshold = 64 << 10;
  start_runtime(dir, c);
  install_generation(1, rank, n);
  cudaStream_t s;
  cuda_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  auto stream = reinterpret_cast<edl::cuda::Stream>(s);
  const DataType types[4] = {DataType::kFloat32, DataType::kFloat16, DataType::kInt32, DataType::kBFloat16};
  std::vector<size_t> counts;
  for (size_t i = 0; i < 60; ++i) counts.push_back(1 + (i * 7919) % 3001);
  counts.push_back(300001);  // float16, reduced as 1.2 MB of float32: split across passes
  std::vector<std::unique_ptr<DeviceBuffer>> bufs;
  std::vector<Handle> handles;
  for (size_t i = 0; i < counts.size(); ++i) {
    const DataType dt = i + 1 == counts.size() ? DataType::kFloat16 : types[i % 4];
    auto h = inputs(rank, counts[i], dt);
    bufs.push_back(std::make_unique<DeviceBuffer>(h.size()));
    cuda_ok(cudaMemcpyAsync(bufs.back()->p, h.data(), h.size(), cudaMemcpyHostToDevice, s), "upload");
    handles.push_back(edl::cuda::allreduce_async(bufs.back()->p, counts[i], dt, stream, ReduceOp::kAverage,
                                                 "f" + std::to_string(i)));
  }
  for (auto& h : handles) h.wait();
  for (size_t i = 0; i < counts.size(); ++i) {
    const DataType dt = i + 1 == counts.size() ? DataType::kFloat16 : types[i % 4];
    const auto got = bufs[i]->download(counts[i] * dtype_size(dt));
    for (size_t e = 0; e < counts[i]; ++e)
      if (!ref_close(ref_get(got.data(), e, dt), ref_result(n, e, ReduceOp::kAverage, dt), dt))
        TFAIL("fused tensor " << i << " (" << dtype_name(dt) << ", " << counts[i] << ") element " << e);
  }
  for (auto comp : {edl::cuda::Compression::kFp16, edl::cuda::Compression::kBf16}) {
    auto h = inputs(rank, 5000, DataType::kFloat32);
    DeviceBuffer d(h.size());
    d.upload(h.data(), h.size());
    edl::cuda::allreduce(d.p, 5000, DataType::kFloat32, stream, ReduceOp::kAverage,
                         comp == edl::cuda::Compression::kFp16 ? "c16" : "cb16", comp);
    const auto got = d.download(h.size());
    const double tol = comp == edl::cuda::Compression::kFp16 ? 2e-3 : 1.6e-2;
    for (size_t e = 0; e < 5000; ++e) {
      const double want = ref_result(n, e, ReduceOp::kAverage, DataType::kFloat32);
      if (std::fabs(ref_get(got.data(), e, DataType::kFloat32) - want) > tol * std::max(1.0, std::fabs(want)))
        TFAIL("compressed average element " << e);
    }
  }
  return 0;
}

}  // namespace

TEST_CASE("gpu: 61 odd-sized tensors of four dtypes fused through a 64 KiB buffer, one cut into passes, fp16 / bf16 "
          "compression",
          "[gpu]") {
  EDL_GPU_TEST_OR_SKIP();
  for (int n : {2, 3}) {
    INFO("ranks: " << n);
    run_ranks_ok(n, [n](const std::string& dir, int r) { return fusion_rank(dir, r, n); });
  }
}

namespace {

// Ordering at both ends: the allreduce sees the copy queued just before it on the caller's stream
// (64 MiB, so that the copy is still running), and stream_wait makes another stream see the result
// without a host wait; a held reference is released once the work finished.
int stream_rank(const std::string& dir, int rank, int n) {
  start_runtime(dir, rank_config());
  install_generation(1, rank, n);
  cudaStream_t a, b;
  cuda_ok(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), "cudaStreamCreate");
  cuda_ok(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), "cudaStreamCreate");
  const size_t count = size_t{16} << 20;
  float* pinned = nullptr;
  cuda_ok(cudaMallocHost(&pinned, count * 4), "cudaMallocHost");
  for (size_t i = 0; i < count; ++i) pinned[i] = static_cast<float>((i + static_cast<size_t>(rank)) % 7);
  DeviceBuffer d(count * 4);
  cuda_ok(cudaMemsetAsync(d.p, 0, count * 4, a), "memset");
  cuda_ok(cudaMemcpyAsync(d.p, pinned, count * 4, cudaMemcpyHostToDevice, a), "upload");
  std::atomic<bool> released{false};
  auto hold = std::shared_ptr<void>(new int(1), [&released](void* p) {
    delete static_cast<int*>(p);
    released = true;
  });
  Handle h = edl::cuda::allreduce_async(d.p, count, DataType::kFloat32, reinterpret_cast<edl::cuda::Stream>(a),
                                        ReduceOp::kSum, "ordered", edl::cuda::Compression::kNone, hold);
  hold.reset();
  edl::cuda::stream_wait(h, reinterpret_cast<edl::cuda::Stream>(b));
  cuda_ok(cudaMemcpyAsync(pinned, d.p, count * 4, cudaMemcpyDeviceToHost, b), "download");
  cuda_ok(cudaStreamSynchronize(b), "sync");
  for (size_t i = 0; i < count; i += 4099) {
    float want = 0;
    for (int r = 0; r < n; ++r) want += static_cast<float>((i + static_cast<size_t>(r)) % 7);
    if (pinned[i] != want) TFAIL("element " << i << ": " << pinned[i] << " want " << want);
  }
  h.wait();
  if (!h.poll()) TFAIL("poll() false after wait()");
  if (!released) TFAIL("the held reference was not released after completion");
  return 0;
}

}  // namespace

TEST_CASE("gpu: ordered after the caller's stream, stream_wait orders another stream, held references released",
          "[gpu]") {
  EDL_GPU_TEST_OR_SKIP();
  for (int n : {1, 2}) {
    INFO("ranks: " << n);
    run_ranks_ok(n, [n](const std::string& dir, int r) { return stream_rank(dir, r, n); });
  }
}
