// fusion_bench: allreduce of a model's whole gradient set, three ways —
//   unfused  one blocking edl::allreduce per tensor (the public API without fusion: every call is
//            its own engine round, as hvd.allreduce per tensor is in Horovod),
//   fused    every tensor through the background engine (edl::allreduce_async by name, then wait),
//   single   one allreduce of one buffer of the same total size (the ideal).
// Informational rows, on a communicator of the bench's own (no engine): unfused_direct (one
// blocking allreduce per tensor: the transport's raw per-call cost) and fused_direct (the fused
// zero-copy allreduce of all tensors). Modes are interleaved per iteration. The verdict line reports
// the engine's per-request overhead (fused - fused_direct) and the unfused per-tensor cost, which
// docs/benchmarks.md sets against Gloo's per-call latency from allreduce_bench.
// Gradient sets (float32, real per-tensor shapes, listed in docs/collectives.md):
//   resnet50     Keras applications ResNet50 with a 10-class head: 214 tensors, 23,555,082 floats
//   mobilenetv2  torchvision MobileNetV2(num_classes=10): 158 tensors, 2,236,682 floats
//
//   edl-run -np 2 build/bench/fusion_bench --json fusion.jsonl
#include <cxxopts.hpp>
#include <iostream>
#include <numeric>

#include "collective/world.h"
#include "collective_common.h"
#include "common/bench_util.h"
#include "edl/edl.h"

using namespace edl;
using namespace edl::bench;

namespace {

// Trainable tensors of keras.applications.ResNet50(weights=None, classes=10): conv kernel + bias,
// BatchNorm gamma + beta, in layer order (the shortcut conv of a stage's first block comes first).
std::vector<size_t> resnet50_sizes() {
  std::vector<size_t> t{7 * 7 * 3 * 64, 64, 64, 64};
  size_t in = 64;
  const size_t stages[4][2] = {{64, 3}, {128, 4}, {256, 6}, {512, 3}};
  for (auto& st : stages) {
    const size_t f = st[0];
    for (size_t b = 0; b < st[1]; ++b) {
      if (b == 0) t.insert(t.end(), {in * 4 * f, 4 * f, 4 * f, 4 * f});
      t.insert(t.end(), {in * f, f, f, f});
      t.insert(t.end(), {9 * f * f, f, f, f});
      t.insert(t.end(), {f * 4 * f, 4 * f, 4 * f, 4 * f});
      in = 4 * f;
    }
  }
  t.insert(t.end(), {2048 * 10, 10});
  return t;
}

// Parameters of torchvision.models.mobilenet_v2(num_classes=10): conv weights (no bias), BN
// weight + bias, classifier weight + bias.
std::vector<size_t> mobilenetv2_sizes() {
  std::vector<size_t> t{3 * 32 * 9, 32, 32};
  size_t in = 32;
  const size_t setting[7][4] = {{1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2}, {6, 64, 4, 2},
                                {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
  for (auto& s : setting) {
    for (size_t b = 0; b < s[2]; ++b) {
      const size_t hidden = in * s[0], out = s[1];
      if (s[0] != 1) t.insert(t.end(), {in * hidden, hidden, hidden});
      t.insert(t.end(), {hidden * 9, hidden, hidden});
      t.insert(t.end(), {hidden * out, out, out});
      in = out;
    }
  }
  t.insert(t.end(), {320 * 1280, 1280, 1280, 1280 * 10, 10});
  return t;
}

struct Model {
  std::string name;
  std::vector<size_t> sizes;
  size_t expect_tensors, expect_floats;
};

void fill(std::vector<std::vector<float>>& ts, int rank) {
  for (size_t k = 0; k < ts.size(); ++k)
    for (size_t i = 0; i < ts[k].size(); ++i) ts[k][i] = static_cast<float>((rank + 1) * static_cast<int>((k + i) % 5 + 1));
}

int64_t count_wrong(const std::vector<std::vector<float>>& ts, int n) {
  const float tri = static_cast<float>(n * (n + 1) / 2);
  int64_t wrong = 0;
  for (size_t k = 0; k < ts.size(); ++k)
    for (size_t i = 0; i < ts[k].size(); ++i)
      if (ts[k][i] != tri * static_cast<float>((k + i) % 5 + 1)) ++wrong;
  return wrong;
}

// One gradient set: every mode timed (interleaved), checked and reported (rank 0).
void run_model(const Model& m, collective::TcpCommunicator* comm, int iters, int warmup, bool engine_stats,
               JsonRows& json, const Table& table) {
  const int rank = comm->rank(), n = comm->size();
  const size_t total = std::accumulate(m.sizes.begin(), m.sizes.end(), size_t{0});
  if (m.sizes.size() != m.expect_tensors || total != m.expect_floats)
    throw std::runtime_error(m.name + " gradient set has " + std::to_string(m.sizes.size()) + " tensors / " +
                             std::to_string(total) + " floats");
  std::vector<std::vector<float>> ts;
  for (size_t s : m.sizes) ts.emplace_back(s);
  std::vector<std::vector<float>> single{std::vector<float>(total)};
  std::vector<std::string> names;
  for (size_t k = 0; k < ts.size(); ++k) names.push_back(m.name + ".grad." + std::to_string(k));

  auto unfused = [&] {
    for (size_t k = ts.size(); k-- > 0;)
      edl::allreduce(ts[k].data(), ts[k].size(), DataType::kFloat32, ReduceOp::kSum, names[k]);
  };
  auto unfused_direct = [&] {
    for (size_t k = ts.size(); k-- > 0;) comm->allreduce(ts[k].data(), ts[k].size(), DataType::kFloat32, ReduceOp::kSum);
  };
  auto fused = [&] {
    std::vector<Handle> hs;
    hs.reserve(ts.size());
    for (size_t k = ts.size(); k-- > 0;)  // backprop order: last layer first
      hs.push_back(edl::allreduce_async(ts[k].data(), ts[k].size(), DataType::kFloat32, ReduceOp::kSum, names[k]));
    for (auto& h : hs) h.wait();
  };
  std::vector<collective::Span> spans;
  for (auto& t : ts) spans.push_back({t.data(), t.size() * sizeof(float)});
  auto spans_direct = [&] { comm->allreduce_spans(spans, DataType::kFloat32, ReduceOp::kSum); };
  auto one = [&] { comm->allreduce(single[0].data(), total, DataType::kFloat32, ReduceOp::kSum); };

  // Modes are interleaved (iteration i of every mode before iteration i+1 of any) so that load
  // changes on a shared machine hit all of them alike.
  const std::vector<std::string> modes{"single", "unfused", "fused", "unfused_direct", "fused_direct"};
  std::vector<std::vector<double>> times(modes.size());
  std::vector<int64_t> wrong(modes.size(), 0);
  for (int it = 0; it < warmup + iters; ++it) {
    for (size_t k = 0; k < modes.size(); ++k) {
      const std::string& md = modes[k];
      auto& bufs = md == "single" ? single : ts;
      fill(bufs, rank);
      comm->barrier();
      double t0 = now_s();
      if (md == "single") one();
      else if (md == "unfused") unfused();
      else if (md == "fused") fused();
      else if (md == "unfused_direct") unfused_direct();
      else spans_direct();
      double ms = (now_s() - t0) * 1e3;
      if (it >= warmup) times[k].push_back(ms);
      if (it == warmup + iters - 1) wrong[k] = count_wrong(bufs, n);
    }
  }
  double single_ms = 0, unfused_ms = 0, fused_ms = 0, fused_direct_ms = 0, unfused_direct_ms = 0;
  for (size_t k = 0; k < modes.size(); ++k) {
    comm->allreduce(&wrong[k], 1, DataType::kInt64, ReduceOp::kSum);
    const double med = median(times[k]);
    if (k == 0) single_ms = med;
    if (modes[k] == "unfused") unfused_ms = med;
    if (modes[k] == "fused") fused_ms = med;
    if (modes[k] == "fused_direct") fused_direct_ms = med;
    if (modes[k] == "unfused_direct") unfused_direct_ms = med;
    const size_t tensors = modes[k] == "single" ? 1 : ts.size();
    if (rank == 0) {
      table.row({m.name, std::to_string(n), modes[k], std::to_string(tensors), fmt(total * 4.0 / 1e6, 1),
                 fmt(med, 2), fmt(med / single_ms, 2), std::to_string(wrong[k])});
      json.write(Json{{"model", m.name}, {"ranks", n}, {"mode", modes[k]}, {"time_ms", med},
                      {"tensors", tensors}, {"floats", total}, {"wrong", wrong[k]}});
    }
  }
  if (rank == 0)
    std::cout << m.name << ": fused / single = " << fmt(fused_ms / single_ms, 2) << " (target <= 1.15); engine "
              << "overhead fused - fused_direct = " << fmt(fused_ms - fused_direct_ms, 2) << " ms ("
              << fmt(1e3 * (fused_ms - fused_direct_ms) / static_cast<double>(ts.size()), 1)
              << " us per request); unfused per tensor " << fmt(1e3 * unfused_ms / static_cast<double>(ts.size()), 1)
              << " us (unfused_direct " << fmt(1e3 * unfused_direct_ms / static_cast<double>(ts.size()), 1)
              << " us; compare Gloo's per-call latency in allreduce_bench)" << std::endl;
  if (rank == 0 && engine_stats) {
    auto st = collective::world_engine_stats();
    std::cout << "engine: cycles " << st.cycles << " cached " << st.cached_cycles << " collectives "
              << st.collectives << " fused " << st.fused_collectives << " negotiation_us " << st.negotiation_us
              << " execution_us " << st.execution_us << " helped_rounds " << st.helped_rounds << std::endl;
  }
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options opts("fusion_bench", "gradient-set allreduce: unfused vs fused (engine) vs single buffer");
  opts.add_options()("json", "append JSON rows to PATH (rank 0)", cxxopts::value<std::string>()->default_value(""))(
      "iters", "timed iterations per mode", cxxopts::value<int>()->default_value("10"))(
      "warmup", "untimed iterations per mode", cxxopts::value<int>()->default_value("2"))(
      "model", "resnet50, mobilenetv2 or all", cxxopts::value<std::string>()->default_value("all"))(
      "local-ranks", "spawn N local ranks with an embedded store (instead of edl-run)",
      cxxopts::value<int>()->default_value("0"))("engine-stats", "print the engine's counters after the fused runs")(
      "h,help", "help");
  auto args = edl::bench::parse_flags(opts, argc, argv);
  if (args.count("help")) {
    std::cout << opts.help() << std::endl;
    return 0;
  }
  if (args["local-ranks"].as<int>() > 0) return run_local_ranks(args["local-ranks"].as<int>(), argc, argv);
  try {
    edl::init();
    const int rank = edl::rank();
    auto comm = collective::make_world_communicator("fusion_bench");
    JsonRows json(rank == 0 ? args["json"].as<std::string>() : "");
    Table table({"model", "ranks", "mode", "tensors", "MB", "time_ms", "vs_single", "wrong"}, 16);
    if (rank == 0) table.header();
    std::vector<Model> models{{"resnet50", resnet50_sizes(), 214, 23555082},
                              {"mobilenetv2", mobilenetv2_sizes(), 158, 2236682}};
    const std::string which = args["model"].as<std::string>();
    const int iters = args["iters"].as<int>(), warmup = args["warmup"].as<int>();
    for (const Model& m : models) {
      if (which != "all" && which != m.name) continue;
      run_model(m, comm.get(), iters, warmup, args.count("engine-stats") > 0, json, table);
    }
    comm->barrier();
    comm.reset();
    edl::shutdown();
  } catch (const std::exception& e) {
    std::cerr << "fusion_bench: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
