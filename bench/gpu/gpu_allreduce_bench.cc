// gpu_allreduce_bench: the GPU path on one GPU (docs/gpu.md), nccl-tests columns (time, algbw,
// busbw, #wrong) in one run:
//   nccl_direct  ncclAllReduce (float32 sum, out of place) on a communicator of its own, the host
//                waiting for each result (cudaStreamSynchronize)
//   edl_nccl     edl::cuda::allreduce (float32 sum, in place) through EDL's engine and its NCCL
//                communicator: the host waits for each result, as above
//   edl_host     the same with EDL_GPU_TRANSPORT=host (staged through pinned memory and EDL's TCP
//                collectives)
// at each rank count of --ranks (ranks beyond one share the GPU, each its own NCCL_HOSTID: this
// proves behaviour, not speed); `fusion`: pack + unpack of the ResNet-50 gradient list (161
// tensors, 25.6 M floats) with the backend's batched kernels vs one device-to-device copy of the
// same bytes; `recovery`: kill -9 of one of 3 ranks -> the survivors' next completed allreduce,
// by shrink and by re-init, --kills times each (gpu_recovery.cc).
// Every row names the device, driver, CUDA and NCCL versions, the commit (--commit) and the time.
// Without a usable GPU it says why and exits with status 3, writing no row.
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <iostream>

#include "collective/runtime_state.h"
#include "common/bench_util.h"
#include "edl/cuda.h"
#include "edl/store.h"
#include "gpu/gpu_bench.h"
#include "gpu/gpu_ranks.h"

namespace edl::bench::gpu {
namespace {

void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
void ok(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(r));
}

// A blocking communicator of its own for nccl_direct; the id through the store.
ncclComm_t direct_comm(const std::string& url, const std::string& key, int rank, int n) {
  auto store = connect_store(url);
  ncclUniqueId id{};
  if (rank == 0) {
    ok(ncclGetUniqueId(&id), "ncclGetUniqueId");
    store->set(key, std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
  } else {
    const std::string v = store->get_wait(key, std::chrono::seconds(60));
    if (v.size() != sizeof(id)) throw std::runtime_error("bad NCCL id in the store");
    std::memcpy(&id, v.data(), sizeof(id));
  }
  ncclComm_t comm = nullptr;
  ok(ncclCommInitRank(&comm, n, id, rank), "ncclCommInitRank");
  return comm;
}

// Counts the elements of the first `count` floats at device pointer p that are not `want`.
long count_wrong(const float* p, size_t count, float want) {
  std::vector<float> h(count);
  ok(cudaMemcpy(h.data(), p, count * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
  long wrong = 0;
  for (float x : h) wrong += x != want;
  return wrong;
}

// One rank of an allreduce row set: every size, a checked operation, warm-up, then --iters timed
// ones; rank 0 writes "<time_us> <wrong>" to <dir>/res-<bytes>.
int allreduce_rank(const BenchContext& c, const std::string& impl, int n, int rank, const std::string& dir) {
  const std::string tag = impl + "-" + std::to_string(n);
  ncclComm_t comm = nullptr;
  if (impl == "nccl_direct") {
    ok(cudaSetDevice(0), "cudaSetDevice");
    comm = direct_comm(c.store_url, "bench/" + tag + "/id", rank, n);
  } else {
    start_rank_runtime(c.store_url, 60000);
    install_generation(tag, 1, rank, n);
  }
  cudaStream_t s;
  ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  size_t max_bytes = 0;
  for (size_t b : c.sizes) max_bytes = std::max(max_bytes, b);
  float *send = nullptr, *recv = nullptr;
  ok(cudaMalloc(&send, max_bytes), "cudaMalloc");
  ok(cudaMalloc(&recv, max_bytes), "cudaMalloc");
  std::vector<float> init(max_bytes / 4, static_cast<float>(rank + 1));
  const float want = static_cast<float>(n * (n + 1) / 2);
  auto stream = reinterpret_cast<edl::cuda::Stream>(s);
  for (size_t bytes : c.sizes) {
    const size_t count = bytes / 4;
    ok(cudaMemcpy(send, init.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    // A pageable cudaMemcpy may return before its DMA finished; the collectives run on the
    // non-blocking stream s, which does not wait for the legacy stream (the first run counted 91,360
    // wrong elements at 1 MiB without this).
    ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    auto op = [&] {
      if (comm) {
        ok(ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, comm, s), "ncclAllReduce");
        ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      } else {
        edl::cuda::allreduce(send, count, DataType::kFloat32, stream, ReduceOp::kSum, "bench");
      }
    };
    op();
    const long wrong = count_wrong(comm ? recv : send, count, want);
    for (int i = 0; i < c.warmup; ++i) op();
    const double t0 = now_s();
    for (int i = 0; i < c.iters; ++i) op();
    const double us = (now_s() - t0) / c.iters * 1e6;
    if (rank == 0) write_file(dir + "/res-" + std::to_string(bytes), fmt(us, 3) + " " + std::to_string(wrong));
  }
  if (comm) ncclCommDestroy(comm);
  return 0;
}

void allreduce_rows(const BenchContext& c, const std::string& impl, int n, Output& out) {
  const std::string dir = c.dir + "/" + impl + "-" + std::to_string(n);
  mkdir_p(dir);
  std::vector<std::string> env;
  if (impl == "edl_host") env.push_back("EDL_GPU_TRANSPORT=host");
  RankSet ranks(dir, n, [&](int r) { return allreduce_rank(c, impl, n, r, dir); }, env);
  const auto st = ranks.wait(600);
  for (int r = 0; r < n; ++r)
    if (st[static_cast<size_t>(r)] != 0) {
      std::cerr << impl << " at " << n << " ranks failed (status " << st[static_cast<size_t>(r)] << "):\n"
                << ranks.logs();
      out.failed = true;
      return;
    }
  for (size_t bytes : c.sizes) {
    double us = 0;
    long wrong = 0;
    if (std::sscanf(slurp(dir + "/res-" + std::to_string(bytes)).c_str(), "%lf %ld", &us, &wrong) != 2) {
      out.failed = true;
      continue;
    }
    Json row = out.base(impl, n, bytes, us, wrong);
    out.emit(row);
  }
}

}  // namespace
}  // namespace edl::bench::gpu

int main(int argc, char** argv) {
  using namespace edl::bench;
  using namespace edl::bench::gpu;
  cxxopts::Options opts("gpu_allreduce_bench", "The GPU path against NCCL called directly (docs/gpu.md)");
  opts.add_options()("ranks", "rank counts of the allreduce rows (ranks share the one GPU)",
                     cxxopts::value<std::string>()->default_value("1,2,3"))(
      "sizes", "bytes per allreduce (K, M suffixes)", cxxopts::value<std::string>()->default_value("4K,1M,16M"))(
      "iters", "timed iterations per size (at most 60)", cxxopts::value<int>()->default_value("20"))(
      "warmup", "untimed iterations per size", cxxopts::value<int>()->default_value("3"))(
      "impls", "rows: nccl_direct,edl_nccl,edl_host,fusion,recovery",
      cxxopts::value<std::string>()->default_value("nccl_direct,edl_nccl,edl_host,fusion,recovery"))(
      "kills", "recovery trials per case (shrink after an idle kill, shrink or fallback after a busy kill, reinit)", cxxopts::value<int>()->default_value("5"))(
      "fusion-reps", "repetitions of the fusion timing", cxxopts::value<int>()->default_value("20"))(
      "commit", "the commit the rows name", cxxopts::value<std::string>()->default_value("unknown"))(
      "json", "append one JSON object per row to this file", cxxopts::value<std::string>()->default_value(""))(
      "probe", "print the device, driver, CUDA and NCCL versions and exit (status 3: no usable GPU)")(
      "h,help", "usage");
  auto args = parse_flags(opts, argc, argv);
  if (args.count("help")) {
    std::cout << opts.help() << "\n";
    return 0;
  }
  try {
    BenchContext c = context_from(args);
    GpuInfo g = probe_gpu(c.dir);
    if (args.count("probe")) {
      std::cout << "gpu=\"" << g.device << "\" driver=" << g.driver << " cuda=" << g.cuda << " nccl=" << g.nccl
                << " revoke_shrink=" << (g.revoke_and_shrink ? "yes" : "no");
      if (!g.ok) std::cout << " why=\"" << g.why << "\"";
      std::cout << "\n";
      return g.ok ? 0 : 3;
    }
    if (!g.ok) {
      std::cerr << "gpu_allreduce_bench: no usable GPU: " << g.why << " (no rows written)\n";
      return 3;
    }
    StoreProcess store(c.dir);
    c.store_url = store.url();
    Output out(c, g, args["json"].as<std::string>());
    std::cout << "device " << g.device << ", driver " << g.driver << ", CUDA " << g.cuda << ", NCCL " << g.nccl
              << (g.revoke_and_shrink ? " (Revoke + Shrink)" : " (no Revoke / Shrink)") << "\n";
    out.header();
    for (const std::string& impl : c.impls) {
      if (impl == "fusion") fusion_row(c, out);
      else if (impl == "recovery") recovery_rows(c, out);
      else
        for (int n : c.ranks) allreduce_rows(c, impl, n, out);
    }
    return out.failed ? 1 : 0;
  } catch (const std::exception& e) {
    std::cerr << "gpu_allreduce_bench: " << e.what() << "\n";
    return 1;
  }
}
