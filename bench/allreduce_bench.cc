// allreduce_bench: float32 sum allreduce, size sweep, nccl-tests columns, EDL (edl_tcp: the TCP
// transport; edl_shm: the shared-memory transport, when all ranks share a host; edl: whatever
// EDL_TRANSPORT picks) vs Gloo's own algorithms called directly (gloo::AllreduceRing, AllreduceRingChunked, AllreduceHalvingDoubling)
// on a gloo::rendezvous::Context over the same store. Every row also checks correctness (`wrong`).
//
//   edl-run -np 2 build/bench/allreduce_bench --json out.jsonl
//   build/bench/allreduce_bench --local-ranks 2 --json out.jsonl     (spawns its own ranks)
//   mpirun -np 2 --mca btl self,vader build/bench/allreduce_bench --impl edl_shm,mpi --json out.jsonl
//       (-DEDL_BENCH_WITH_MPI=ON: Open MPI rows "mpi_shm"; with --mca btl self,tcp: "mpi_tcp")
//
// busbw = algbw * 2(n-1)/n (docs/benchmarks.md). Rank 0 prints and writes the rows.
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <cxxopts.hpp>
#include <functional>
#include <iostream>
#include <memory>

#include "collective/world.h"
#include "collective_common.h"
#include "common/bench_util.h"
#include "edl/edl.h"
#ifdef EDL_BENCH_WITH_MPI
#include "mpi_world.h"
#endif

using namespace edl;
using namespace edl::bench;

namespace {

// Element i of rank r: (r+1) * (i % 7 + 1); the sum over ranks is exact in float32.
void fill(std::vector<float>& v, int rank) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((rank + 1) * static_cast<int>(i % 7 + 1));
}

int64_t count_wrong(const std::vector<float>& v, int n) {
  int64_t wrong = 0;
  const float tri = static_cast<float>(n * (n + 1) / 2);
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] != tri * static_cast<float>(i % 7 + 1)) ++wrong;
  return wrong;
}

struct Result {
  double time_us;
  int64_t wrong;
};

// Times `iters` runs of every op, interleaved (iteration i of every op before iteration i+1 of any,
// so that load changes on a shared machine hit all implementations alike), each run started
// together on all ranks (barrier on the EDL communicator). Then every op runs once on fresh inputs
// and is checked. Returns rank 0's median per op and the total number of wrong elements.
std::vector<Result> measure(collective::TcpCommunicator& ctl, std::vector<float>& buf, int iters, int warmup,
                            const std::vector<std::function<void()>>& ops) {
  fill(buf, ctl.rank());
  for (auto& op : ops)
    for (int i = 0; i < warmup; ++i) op();
  std::vector<std::vector<double>> t(ops.size());
  for (int i = 0; i < iters; ++i) {
    for (size_t k = 0; k < ops.size(); ++k) {
      ctl.barrier();
      double t0 = now_s();
      ops[k]();
      t[k].push_back((now_s() - t0) * 1e6);
    }
  }
  std::vector<Result> out;
  for (size_t k = 0; k < ops.size(); ++k) {
    fill(buf, ctl.rank());
    ctl.barrier();
    ops[k]();
    int64_t wrong = count_wrong(buf, ctl.size());
    ctl.allreduce(&wrong, 1, DataType::kInt64, ReduceOp::kSum);
    out.push_back({median(t[k]), wrong});
  }
  return out;
}

cxxopts::Options make_options() {
  cxxopts::Options opts("allreduce_bench", "float32 allreduce: EDL vs Gloo, nccl-tests columns");
  opts.add_options()("json", "append JSON rows to PATH (rank 0)", cxxopts::value<std::string>()->default_value(""))(
      "min-bytes", "smallest message", cxxopts::value<size_t>()->default_value("4096"))(
      "max-bytes", "largest message", cxxopts::value<size_t>()->default_value(std::to_string(256u << 20)))(
      "factor", "size step factor", cxxopts::value<size_t>()->default_value("4"))(
      "iters", "timed iterations per size (0 = auto: ~256 MiB of traffic, 5..200)",
      cxxopts::value<int>()->default_value("0"))("warmup", "untimed runs per size", cxxopts::value<int>()->default_value("2"))(
      "impl", "comma list of edl,edl_tcp,edl_shm,gloo_ring,gloo_ring_chunked,gloo_halving_doubling,mpi (under mpirun)",
      cxxopts::value<std::string>()->default_value("edl_tcp,edl_shm,gloo_ring,gloo_ring_chunked,gloo_halving_doubling"))(
      "local-ranks", "spawn N local ranks with an embedded store (instead of edl-run)",
      cxxopts::value<int>()->default_value("0"))(
      "chunk-kib", "EDL ring chunk (0 = default)", cxxopts::value<size_t>()->default_value("0"))(
      "eager-kib", "EDL eager limit (-1 = default)", cxxopts::value<long>()->default_value("-1"))(
      "spin-us", "EDL spin before blocking (-1 = default)", cxxopts::value<long>()->default_value("-1"))(
      "window-mib", "EDL ring window (0 = default)", cxxopts::value<size_t>()->default_value("0"))(
      "shm-chunk-kib", "EDL shared-memory round size (0 = default)", cxxopts::value<size_t>()->default_value("0"))(
      "shm-eager-kib", "EDL shared-memory eager limit (-1 = default)", cxxopts::value<long>()->default_value("-1"))(
      "h,help", "help");
  return opts;
}

// The communicator's tuning with the --chunk-kib ... --shm-eager-kib overrides applied.
collective::AlgorithmTuning tuning_from(const cxxopts::ParseResult& args, collective::AlgorithmTuning tuning) {
  if (args["chunk-kib"].as<size_t>() > 0) tuning.chunk_bytes = args["chunk-kib"].as<size_t>() << 10;
  if (args["eager-kib"].as<long>() >= 0) tuning.eager_bytes = static_cast<size_t>(args["eager-kib"].as<long>()) << 10;
  if (args["window-mib"].as<size_t>() > 0) tuning.window_bytes = args["window-mib"].as<size_t>() << 20;
  if (args["spin-us"].as<long>() >= 0) tuning.spin = std::chrono::microseconds(args["spin-us"].as<long>());
  if (args["shm-chunk-kib"].as<size_t>() > 0) tuning.shm_chunk_bytes = args["shm-chunk-kib"].as<size_t>() << 10;
  if (args["shm-eager-kib"].as<long>() >= 0)
    tuning.shm_eager_bytes = static_cast<size_t>(args["shm-eager-kib"].as<long>()) << 10;
  return tuning;
}

// Everything the rows run on: EDL's communicators (one per transport row) and Gloo's context.
struct Backends {
  std::function<bool(const char*)> want;  // is this impl in --impl?
  std::shared_ptr<collective::TcpCommunicator> comm, comm_tcp, comm_shm;
  std::shared_ptr<gloo::rendezvous::Context> gctx;
  bool mpi = false;
};

Backends open_backends(const cxxopts::ParseResult& args, int rank, int n, bool mpi) {
  Backends b;
  b.mpi = mpi;
  const std::string impls = "," + args["impl"].as<std::string>() + ",";
  b.want = [impls](const char* impl) { return impls.find(std::string(",") + impl + ",") != std::string::npos; };
  b.comm = collective::make_world_communicator("allreduce_bench");
  const collective::AlgorithmTuning tuning = tuning_from(args, b.comm->tuning());
  b.comm->set_tuning(tuning);
  // One communicator per transport row (every rank decides the same: the rows exist on all or none).
  if (b.want("edl_tcp")) b.comm_tcp = collective::make_world_communicator("allreduce_bench_tcp", Transport::kTcp);
  if (b.want("edl_shm")) {
    b.comm_shm = collective::make_world_communicator("allreduce_bench_shm", Transport::kAuto);
    if (std::string(b.comm_shm->transport_name()) != "shm") {
      if (rank == 0 && n > 1) std::cerr << "allreduce_bench: ranks on several hosts, no edl_shm rows" << std::endl;
      b.comm_shm.reset();
    }
  }
  for (auto* c : {&b.comm_tcp, &b.comm_shm})
    if (*c) (*c)->set_tuning(tuning);
  if (n > 1 && (b.want("gloo_ring") || b.want("gloo_ring_chunked") || b.want("gloo_halving_doubling"))) {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    b.gctx = std::make_shared<gloo::rendezvous::Context>(rank, n);
    GlooStoreAdapter gstore(collective::world_store(), "allreduce_bench/gloo/");
    b.gctx->connectFullMesh(gstore, dev);
  }
  return b;
}

// Measures every selected implementation at one message size and reports the rows (rank 0).
void run_size(Backends& b, size_t bytes, const cxxopts::ParseResult& args, JsonRows& json, const Table& table) {
  const int rank = b.comm->rank(), n = b.comm->size();
  const size_t count = bytes / sizeof(float);
  std::vector<float> buf(count);
  int iters = args["iters"].as<int>();
  if (iters <= 0) iters = static_cast<int>(std::max<size_t>(5, std::min<size_t>(200, (256u << 20) / bytes)));
  std::vector<std::pair<std::string, std::function<void()>>> runs;
  auto edl_row = [&](const char* impl, collective::TcpCommunicator* c) {
    runs.emplace_back(impl, [&buf, count, c] { c->allreduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum); });
  };
  if (b.want("edl")) edl_row("edl", b.comm.get());
  if (b.comm_tcp) edl_row("edl_tcp", b.comm_tcp.get());
  if (b.comm_shm) edl_row("edl_shm", b.comm_shm.get());
#ifdef EDL_BENCH_WITH_MPI
  if (b.mpi && b.want("mpi"))
    runs.emplace_back(mpi_row_name(), [&] {
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    });
#endif
  std::unique_ptr<gloo::AllreduceRing<float>> g_ring;
  std::unique_ptr<gloo::AllreduceRingChunked<float>> g_chunked;
  std::unique_ptr<gloo::AllreduceHalvingDoubling<float>> g_hd;
  if (b.gctx) {
    std::vector<float*> ptrs{buf.data()};
    if (b.want("gloo_ring")) {
      g_ring = std::make_unique<gloo::AllreduceRing<float>>(b.gctx, ptrs, static_cast<int>(count));
      runs.emplace_back("gloo_ring", [&] { g_ring->run(); });
    }
    if (b.want("gloo_ring_chunked")) {
      g_chunked = std::make_unique<gloo::AllreduceRingChunked<float>>(b.gctx, ptrs, static_cast<int>(count));
      runs.emplace_back("gloo_ring_chunked", [&] { g_chunked->run(); });
    }
    if (b.want("gloo_halving_doubling")) {
      g_hd = std::make_unique<gloo::AllreduceHalvingDoubling<float>>(b.gctx, ptrs, static_cast<int>(count));
      runs.emplace_back("gloo_halving_doubling", [&] { g_hd->run(); });
    }
  }
  std::vector<std::function<void()>> ops;
  for (auto& run : runs) ops.push_back(run.second);
  std::vector<Result> results = measure(*b.comm, buf, iters, args["warmup"].as<int>(), ops);
  if (rank != 0) return;
  for (size_t k = 0; k < runs.size(); ++k) {
    const std::string& impl = runs[k].first;
    const Result& r = results[k];
    const double algbw = static_cast<double>(bytes) / (r.time_us * 1e-6) / 1e9;
    const double busbw = algbw * 2.0 * (n - 1) / n;
    table.row({impl, std::to_string(n), std::to_string(bytes), fmt(r.time_us, 1), fmt(algbw, 3), fmt(busbw, 3),
               std::to_string(r.wrong)});
    json.write(Json{{"impl", impl},          {"ranks", n},           {"bytes", bytes},
                    {"count", count},        {"iters", iters},       {"time_us", r.time_us},
                    {"algbw_gbps", algbw},   {"busbw_gbps", busbw},  {"wrong", r.wrong}});
  }
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options opts = make_options();
  auto args = edl::bench::parse_flags(opts, argc, argv);
  if (args.count("help")) {
    std::cout << opts.help() << std::endl;
    return 0;
  }
  if (args["local-ranks"].as<int>() > 0) return run_local_ranks(args["local-ranks"].as<int>(), argc, argv);
  bool mpi = false;
#ifdef EDL_BENCH_WITH_MPI
  std::unique_ptr<StoreServer> mpi_store;
  mpi = launched_by_mpirun();
  if (mpi) mpi_store = init_mpi_world(&argc, &argv);
#endif

  try {
    edl::init();
    const int rank = edl::rank(), n = edl::size();
    Backends b = open_backends(args, rank, n, mpi);
    JsonRows json(rank == 0 ? args["json"].as<std::string>() : "");
    Table table({"impl", "ranks", "bytes", "time_us", "algbw_GB/s", "busbw_GB/s", "wrong"});
    if (rank == 0) table.header();
    const size_t maxb = args["max-bytes"].as<size_t>();
    for (size_t bytes = args["min-bytes"].as<size_t>(); bytes <= maxb; bytes *= args["factor"].as<size_t>())
      run_size(b, bytes, args, json, table);
    b.comm->barrier();
    b = Backends{};  // communicators and the Gloo context go before shutdown
    edl::shutdown();
  } catch (const std::exception& e) {
    std::cerr << "allreduce_bench: " << e.what() << std::endl;
    return 1;
  }
#ifdef EDL_BENCH_WITH_MPI
  if (mpi) MPI_Finalize();
#endif
  return 0;
}
