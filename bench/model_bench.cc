// model_bench: training (forward + backward + SGD-momentum step) and inference throughput of the
// reference models at a fixed batch on random data, for each thread count.
//
//   model_bench [--models resnet20,mobilenetv2] [--threads 1,2] [--batch 64] [--iters N] [--json PATH]
//
// Every row also checks correctness: the training loss must stay finite ("ok" column); libtorch rows
// (-DEDL_BENCH_WITH_LIBTORCH=ON) also need the same parameter count as the EDL model.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "common/bench_util.h"
#include "models/common/sgd.h"
#include "models/mobilenetv2/mobilenetv2.h"
#include "models/resnet20/resnet20.h"
#ifdef EDL_BENCH_WITH_LIBTORCH
#include "model_bench_libtorch.h"
#endif

namespace {

using edl::bench::Json;

struct Result {
  double images_per_s = 0;
  bool finite = true;
};

using edl::bench::split;

std::unique_ptr<edl::models::Model> make_model(const std::string& name, const edl::models::ModelConfig& c) {
  if (name == "resnet20") return std::make_unique<edl::models::ResNet20>(c);
  if (name == "mobilenetv2") return std::make_unique<edl::models::MobileNetV2>(c);
  throw std::invalid_argument("unknown model '" + name + "' (resnet20, mobilenetv2)");
}

// Median images/s over `iters` timed steps after `warmup` untimed ones.
Result run_edl(const std::string& model, bool train, int threads, int batch, int warmup, int iters,
               const edl::models::ModelConfig& base) {
  edl::models::ModelConfig c = base;
  c.threads = threads;
  auto m = make_model(model, c);
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> pixel(-1.0f, 1.0f);
  std::uniform_int_distribution<int32_t> label(0, c.classes - 1);
  std::vector<float> images(static_cast<size_t>(batch) * c.channels * c.height * c.width);
  std::vector<int32_t> labels(batch);
  for (float& v : images) v = pixel(rng);
  for (int32_t& v : labels) v = label(rng);
  edl::models::SgdMomentum sgd(m->parameters(), {0.01f, 0.9f, 5e-4f});
  std::vector<int32_t> predicted(batch);
  Result r;
  std::vector<double> times;
  for (int i = 0; i < warmup + iters; ++i) {
    double t0 = edl::bench::now_s();
    if (train) {
      edl::models::LossResult l = m->forward(images.data(), labels.data(), batch, true);
      m->backward();
      sgd.step();
      r.finite = r.finite && std::isfinite(l.loss);
    } else {
      m->predict(images.data(), batch, predicted.data());
    }
    double t1 = edl::bench::now_s();
    if (i >= warmup) times.push_back(t1 - t0);
  }
  r.images_per_s = batch / edl::bench::median(times);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("model_bench", "Training and inference throughput of the EDL reference models");
  options.add_options()
      ("models", "comma-separated models", cxxopts::value<std::string>()->default_value("resnet20,mobilenetv2"))
      ("threads", "comma-separated thread counts", cxxopts::value<std::string>()->default_value("1,2"))
      ("batch", "images per step", cxxopts::value<int>()->default_value("64"))
      ("iters", "timed steps per row (median reported)", cxxopts::value<int>()->default_value("10"))
      ("warmup", "untimed steps per row", cxxopts::value<int>()->default_value("2"))
      ("modes", "comma-separated: train, infer", cxxopts::value<std::string>()->default_value("train,infer"))
      ("input", "input shape: 3x32x32 or 1x28x28", cxxopts::value<std::string>()->default_value("3x32x32"))
      ("json", "append one JSON object per row to PATH", cxxopts::value<std::string>()->default_value(""))
      ("h,help", "print usage");
  cxxopts::ParseResult args;
  try {
    args = options.parse(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n" << options.help() << std::endl;
    return 2;
  }
  if (args.count("help")) {
    std::cout << options.help() << std::endl;
    return 0;
  }
  const int batch = args["batch"].as<int>();
  const int iters = args["iters"].as<int>();
  const int warmup = args["warmup"].as<int>();
  edl::models::ModelConfig base;
  const std::string input = args["input"].as<std::string>();
  if (input == "1x28x28") {
    base.channels = 1, base.height = 28, base.width = 28;
  } else if (input != "3x32x32") {
    std::cerr << "--input must be 3x32x32 or 1x28x28" << std::endl;
    return 2;
  }
  if (batch <= 0 || iters <= 0 || warmup < 0) {
    std::cerr << "--batch and --iters must be positive, --warmup >= 0" << std::endl;
    return 2;
  }
  std::vector<int> thread_counts;
  for (const std::string& t : split(args["threads"].as<std::string>())) thread_counts.push_back(std::stoi(t));

  edl::bench::JsonRows json(args["json"].as<std::string>());
  edl::bench::Table table({"model", "mode", "threads", "impl", "images/s", "ms/step", "ok"});
  std::printf("model_bench: batch %d, input %s, median of %d steps\n", batch, input.c_str(), iters);
  table.header();
  int failures = 0;
  for (const std::string& model : split(args["models"].as<std::string>())) {
    for (const std::string& mode : split(args["modes"].as<std::string>())) {
      if (mode != "train" && mode != "infer") {
        std::cerr << "unknown mode '" << mode << "'" << std::endl;
        return 2;
      }
      for (int threads : thread_counts) {
        std::vector<std::pair<std::string, Result>> rows;
        rows.emplace_back("edl", run_edl(model, mode == "train", threads, batch, warmup, iters, base));
#ifdef EDL_BENCH_WITH_LIBTORCH
        auto lt = edl::bench::run_libtorch(model, mode == "train", threads, batch, warmup, iters, base.channels,
                                           base.height, base.width, base.classes);
        // The baseline must be the same architecture: compare parameter counts.
        const size_t edl_params = make_model(model, base)->parameter_count();
        rows.emplace_back("libtorch", Result{lt.images_per_s, lt.finite && lt.parameters == edl_params});
#endif
        for (const auto& [impl, r] : rows) {
          if (!r.finite) ++failures;
          table.row({model, mode, std::to_string(threads), impl, edl::bench::fmt(r.images_per_s, 1),
                     edl::bench::fmt(1000.0 * batch / r.images_per_s, 1), r.finite ? "yes" : "NO"});
          json.write(Json{{"model", model},
                          {"mode", mode},
                          {"threads", threads},
                          {"images_per_s", r.images_per_s},
                          {"impl", impl}});
        }
      }
    }
  }
  return failures == 0 ? 0 : 1;
}
