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
//   build/bench/allreduce_bench --local-ranks 4 --emulated-hosts 2 --link 1gbit --impl edl_tcp,edl_hier
//       (root: 2 emulated hosts x 2 ranks on network namespaces; edl_hier: the hierarchical allreduce)
//   build/bench/allreduce_bench --suite --json out.jsonl   (every comparison in one run: allreduce_launch.h)
//
// Rows edl_tcp_direct / edl_tcp_hd / edl_tcp_ring force one algorithm of the TCP path (crossover
// measurements, docs/collectives.md). Every row carries "hosts" and "link" (1 / "loopback" unless emulated).
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

#include "allreduce_launch.h"
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
// together on all ranks (barrier on the EDL communicator). The order rotates by one op per
// iteration: the op that runs right after another implementation's (whose buffers and socket data
// then fill the caches) pays 5-15% at 1-16 MiB on this machine, so every op takes each place in
// the order equally often. Then every op runs once on fresh inputs and is checked. Returns rank
// 0's median per op and the total number of wrong elements.
std::vector<Result> measure(collective::TcpCommunicator& ctl, std::vector<float>& buf, int iters, int warmup,
                            const std::vector<std::function<void()>>& ops) {
  fill(buf, ctl.rank());
  for (auto& op : ops)
    for (int i = 0; i < warmup; ++i) op();
  std::vector<std::vector<double>> t(ops.size());
  for (int i = 0; i < iters; ++i) {
    for (size_t j = 0; j < ops.size(); ++j) {
      const size_t k = (j + static_cast<size_t>(i)) % ops.size();
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

// The command line (docs/benchmarks.md lists the rows).
void declare_flags(cxxopts::Options& opts) {
  opts.add_options()("json", "append JSON rows to PATH (rank 0)", cxxopts::value<std::string>()->default_value(""))(
      "min-bytes", "smallest message", cxxopts::value<size_t>()->default_value("4096"))(
      "max-bytes", "largest message", cxxopts::value<size_t>()->default_value(std::to_string(256u << 20)))(
      "factor", "size step factor", cxxopts::value<size_t>()->default_value("4"))(
      "iters", "timed iterations per size (0 = auto: ~256 MiB of traffic, 5..200)",
      cxxopts::value<int>()->default_value("0"))("warmup", "untimed runs per size", cxxopts::value<int>()->default_value("2"))(
      "impl",
      "comma list of edl,edl_tcp,edl_shm,edl_hier,edl_tcp_direct,edl_tcp_hd,edl_tcp_ring,gloo_ring,gloo_ring_chunked,"
      "gloo_halving_doubling,mpi (under mpirun)",
      cxxopts::value<std::string>()->default_value("edl_tcp,edl_shm,gloo_ring,gloo_ring_chunked,gloo_halving_doubling"))(
      "local-ranks", "spawn N local ranks with an embedded store (instead of edl-run)",
      cxxopts::value<int>()->default_value("0"))(
      "emulated-hosts", "with --local-ranks: spread the ranks over H emulated hosts (root)",
      cxxopts::value<int>()->default_value("0"))(
      "link", "emulated link (1gbit, 10gbit, ...+<ms>ms)", cxxopts::value<std::string>()->default_value("1gbit"))(
      "link-label", "(internal) the link actually emulated", cxxopts::value<std::string>()->default_value(""))(
      "suite", "run every comparison (local 2 and 4 ranks, MPI when built with it, emulated hosts)")(
      "suite-repeats", "with --suite: run every configuration this many times", cxxopts::value<int>()->default_value("3"))(
      "repeat-index", "(internal) the suite repetition of these rows", cxxopts::value<int>()->default_value("0"))(
      "chunk-kib", "EDL ring chunk (0 = default)", cxxopts::value<size_t>()->default_value("0"))(
      "eager-kib", "EDL eager limit (-1 = default)", cxxopts::value<long>()->default_value("-1"))(
      "spin-us", "EDL spin before blocking (-1 = default)", cxxopts::value<long>()->default_value("-1"))(
      "window-mib", "EDL ring window (0 = default)", cxxopts::value<size_t>()->default_value("0"))(
      "shm-chunk-kib", "EDL shared-memory round size (0 = default)", cxxopts::value<size_t>()->default_value("0"))(
      "shm-eager-kib", "EDL shared-memory eager limit (-1 = default)", cxxopts::value<long>()->default_value("-1"))(
      "h,help", "help");
}

// Everything the rows of one rank run on: one communicator per transport row (every rank decides
// the same: the rows exist on all or none), the forced TCP algorithms, Gloo's context.
struct Backends {
  int rank = 0, n = 1, hosts = 1;
  bool mpi = false;
  std::string impls, link;
  std::shared_ptr<collective::TcpCommunicator> comm, comm_tcp, comm_shm, comm_hier;
  std::vector<std::pair<std::string, std::shared_ptr<collective::TcpCommunicator>>> forced;
  std::shared_ptr<gloo::rendezvous::Context> gctx;
  bool want(const std::string& impl) const { return impls.find("," + impl + ",") != std::string::npos; }
};

collective::AlgorithmTuning tuning_from_flags(const cxxopts::ParseResult& args, collective::AlgorithmTuning tuning) {
  if (args["chunk-kib"].as<size_t>() > 0) tuning.chunk_bytes = args["chunk-kib"].as<size_t>() << 10;
  if (args["eager-kib"].as<long>() >= 0) tuning.eager_bytes = static_cast<size_t>(args["eager-kib"].as<long>()) << 10;
  if (args["window-mib"].as<size_t>() > 0) tuning.window_bytes = args["window-mib"].as<size_t>() << 20;
  if (args["spin-us"].as<long>() >= 0) tuning.spin = std::chrono::microseconds(args["spin-us"].as<long>());
  if (args["shm-chunk-kib"].as<size_t>() > 0) tuning.shm_chunk_bytes = args["shm-chunk-kib"].as<size_t>() << 10;
  if (args["shm-eager-kib"].as<long>() >= 0)
    tuning.shm_eager_bytes = static_cast<size_t>(args["shm-eager-kib"].as<long>()) << 10;
  return tuning;
}

// A communicator of `transport` that is kept only when it really uses `expect` (else a note, no rows).
std::shared_ptr<collective::TcpCommunicator> transport_comm(const Backends& b, const char* name, Transport transport,
                                                            const char* expect, const char* why_not) {
  auto c = collective::make_world_communicator(name, transport);
  if (expect && std::string(c->transport_name()) != expect) {
    if (b.rank == 0 && b.n > 1) std::cerr << "allreduce_bench: " << why_not << std::endl;
    return nullptr;
  }
  return c;
}

Backends open_backends(const cxxopts::ParseResult& args, bool mpi) {
  Backends b;
  b.rank = edl::rank();
  b.n = edl::size();
  b.mpi = mpi;
  b.impls = "," + args["impl"].as<std::string>() + ",";
  b.comm = collective::make_world_communicator("allreduce_bench");
  const collective::AlgorithmTuning tuning = tuning_from_flags(args, b.comm->tuning());
  b.comm->set_tuning(tuning);
  if (b.want("edl_tcp")) b.comm_tcp = transport_comm(b, "allreduce_bench_tcp", Transport::kTcp, nullptr, "");
  if (b.want("edl_hier"))
    b.comm_hier = transport_comm(b, "allreduce_bench_hier", Transport::kAuto, "hier",
                                 "the ranks do not span several hosts with equal rank counts, no edl_hier rows");
  for (auto [name, algo] : {std::pair<const char*, collective::AllreduceAlgorithm>{"edl_tcp_direct",
                                                                                    collective::AllreduceAlgorithm::kDirect},
                            {"edl_tcp_hd", collective::AllreduceAlgorithm::kHalvingDoubling},
                            {"edl_tcp_ring", collective::AllreduceAlgorithm::kRing}}) {
    if (!b.want(name)) continue;  // forced algorithms of the TCP path (crossover measurements)
    auto c = collective::make_world_communicator(std::string("allreduce_bench_") + name, Transport::kTcp);
    collective::AlgorithmTuning t = tuning;
    t.eager_bytes = algo == collective::AllreduceAlgorithm::kDirect ? (size_t{1} << 40) : 0;
    t.direct_total_bytes = t.eager_bytes;
    t.hd_max_bytes = algo == collective::AllreduceAlgorithm::kHalvingDoubling ? (size_t{1} << 40) : 0;
    t.hd_max_bytes_2_ranks = t.hd_max_bytes_one_host = t.hd_max_bytes;
    t.hd_min_ranks = 2;
    c->set_tuning(t);
    b.forced.emplace_back(name, c);
  }
  if (b.want("edl_shm"))
    b.comm_shm = transport_comm(b, "allreduce_bench_shm", Transport::kAuto, "shm", "ranks on several hosts, no edl_shm rows");
  for (auto* c : {&b.comm_tcp, &b.comm_shm, &b.comm_hier})
    if (*c) (*c)->set_tuning(tuning);
  const char* emulated = std::getenv("EDL_EMULATED_HOSTS");
  b.hosts = emulated ? std::atoi(emulated) : 1;
  b.link = args["link-label"].as<std::string>().empty() ? "loopback" : args["link-label"].as<std::string>();
  if (b.n > 1 && (b.want("gloo_ring") || b.want("gloo_ring_chunked") || b.want("gloo_halving_doubling"))) {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    b.gctx = std::make_shared<gloo::rendezvous::Context>(b.rank, b.n);
    GlooStoreAdapter gstore(collective::world_store(), "allreduce_bench/gloo/");
    b.gctx->connectFullMesh(gstore, dev);
  }
  return b;
}

// The rows of one message size: every implementation timed side by side (measure), then printed.
void run_size(Backends& b, size_t bytes, const cxxopts::ParseResult& args, JsonRows& json, Table& table) {
  const size_t count = bytes / sizeof(float);
  std::vector<float> buf(count);
  int iters = args["iters"].as<int>();
  if (iters <= 0) iters = static_cast<int>(std::max<size_t>(5, std::min<size_t>(200, (256u << 20) / bytes)));
  std::vector<std::pair<std::string, std::function<void()>>> runs;
  auto edl_row = [&](const std::string& name, collective::TcpCommunicator* c) {
    runs.emplace_back(name, [&buf, count, c] { c->allreduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum); });
  };
  if (b.want("edl")) edl_row("edl", b.comm.get());
  if (b.comm_tcp) edl_row("edl_tcp", b.comm_tcp.get());
  if (b.comm_shm) edl_row("edl_shm", b.comm_shm.get());
  if (b.comm_hier) edl_row("edl_hier", b.comm_hier.get());
  for (auto& f : b.forced) edl_row(f.first, f.second.get());
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
  if (b.rank != 0) return;
  for (size_t k = 0; k < runs.size(); ++k) {
    const Result& r = results[k];
    const double algbw = static_cast<double>(bytes) / (r.time_us * 1e-6) / 1e9;
    const double busbw = algbw * 2.0 * (b.n - 1) / b.n;
    table.row({runs[k].first, std::to_string(b.n), std::to_string(bytes), fmt(r.time_us, 1), fmt(algbw, 3),
               fmt(busbw, 3), std::to_string(r.wrong)});
    json.write(Json{{"impl", runs[k].first}, {"ranks", b.n},         {"hosts", b.hosts},
                    {"link", b.link},        {"repeat", args["repeat-index"].as<int>()},
                    {"bytes", bytes},        {"count", count},       {"iters", iters},
                    {"time_us", r.time_us},  {"algbw_gbps", algbw},  {"busbw_gbps", busbw},
                    {"wrong", r.wrong}});
  }
}

// --suite: every configuration in one run (allreduce_launch.h).
int run_suite_from_flags(const cxxopts::ParseResult& args) {
#ifdef EDL_BENCH_WITH_MPI
  const bool with_mpi = true;
#else
  const bool with_mpi = false;
#endif
  std::vector<std::string> extra;  // size range and iterations given to the suite go to every configuration
  for (const char* f : {"min-bytes", "max-bytes", "factor"})
    if (args.count(f)) extra.push_back("--" + std::string(f) + "=" + std::to_string(args[f].as<size_t>()));
  if (args.count("iters")) extra.push_back("--iters=" + std::to_string(args["iters"].as<int>()));
  return run_suite(args["json"].as<std::string>(), with_mpi, extra, args["suite-repeats"].as<int>());
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options opts("allreduce_bench", "float32 allreduce: EDL vs Gloo, nccl-tests columns");
  declare_flags(opts);
  auto args = edl::bench::parse_flags(opts, argc, argv);
  if (args.count("help")) {
    std::cout << opts.help() << std::endl;
    return 0;
  }
  if (args.count("suite")) return run_suite_from_flags(args);
  if (args["local-ranks"].as<int>() > 0 && args["emulated-hosts"].as<int>() > 0)
    return run_emulated_ranks(args["local-ranks"].as<int>(), args["emulated-hosts"].as<int>(),
                              args["link"].as<std::string>(), argc, argv);
  if (args["local-ranks"].as<int>() > 0) return run_local_ranks(args["local-ranks"].as<int>(), argc, argv);
  bool mpi = false;
#ifdef EDL_BENCH_WITH_MPI
  std::unique_ptr<StoreServer> mpi_store;
  mpi = launched_by_mpirun();
  if (mpi) mpi_store = init_mpi_world(&argc, &argv);
#endif
  try {
    edl::init();
    Backends b = open_backends(args, mpi);
    JsonRows json(b.rank == 0 ? args["json"].as<std::string>() : "");
    Table table({"impl", "ranks", "bytes", "time_us", "algbw_GB/s", "busbw_GB/s", "wrong"});
    if (b.rank == 0) table.header();
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
