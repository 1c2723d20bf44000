// edl-torch-reproducible: the libtorch ResNet20 on Fashion-MNIST in EDL's reproducible mode
// (docs/torch.md, "Reproducible mode"). Every step trains --micro-batches micro-batches of
// --micro-batch records whatever the number of workers; EDL sums their gradients (and the batch-norm
// statistics) exactly, so the final model is bitwise the same with 1, 2 or 3 workers and after
// kill -9, joins and leaves. Rank 0 prints "CHECKSUM <16 hex digits>" (FNV-1a over the parameters,
// then the buffers) at the end; compare two runs from outside:
//   build/examples/edl-torch-reproducible | grep CHECKSUM
//   edl-run --min-np 1 --max-np 3 -np 2 build/examples/edl-torch-reproducible | grep CHECKSUM
// Options: --epochs E (2) --train-records N (480) --micro-batch B (4) --micro-batches M (6) --lr LR (0.05)
// --seed S (1) --data DIR --step-delay-ms MS (0: a pause per step, to watch events) --step-log PATH
// (rank 0 appends each finished step's number, for scripts that act at a given step).
#include <edl/data.h>
#include <edl/edl.h>
#include <edl/torch.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <thread>

#include "resnet20.h"

namespace {

std::map<std::string, std::string> parse(int argc, char** argv) {
  std::map<std::string, std::string> args = {{"epochs", "2"},        {"train-records", "480"}, {"micro-batch", "4"},
                                             {"micro-batches", "6"}, {"lr", "0.05"},           {"seed", "1"},
                                             {"data", edl::data::kFashionMnistDir}, {"step-delay-ms", "0"},
                                             {"step-log", ""}};
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string key = argv[i];
    if (key.rfind("--", 0) != 0 || !args.count(key.substr(2))) throw edl::InvalidArgument("unknown option " + key);
    args[key.substr(2)] = argv[i + 1];
  }
  if (argc % 2 == 0) throw edl::InvalidArgument(std::string("option ") + argv[argc - 1] + " needs a value");
  return args;
}

// FNV-1a 64 over the bytes of every parameter, then every buffer (the module's registration order).
uint64_t checksum(const torch::nn::Module& net) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const torch::Tensor& t) {
    torch::Tensor c = t.detach().contiguous();
    const auto* p = static_cast<const unsigned char*>(c.data_ptr());
    for (size_t i = 0; i < c.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  };
  for (const auto& p : net.parameters()) mix(p);
  for (const auto& b : net.buffers()) mix(b);
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    auto args = parse(argc, argv);
    edl::init();
    torch::set_num_threads(1);  // deterministic kernels, the same on every worker
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
    torch::manual_seed(std::stoull(args["seed"]));
    auto train = edl::data::open_fashion_mnist(args["data"], true);
    const uint64_t records = std::min<uint64_t>(std::stoull(args["train-records"]), train->size());

    edl_examples::ResNet20 net(1, 10);
    torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(std::stod(args["lr"])).momentum(0.9).weight_decay(5e-4));
    edl::torch::DistributedOptimizerOptions oo;
    oo.deterministic = true;  // exact sums; the LR does not follow the world size
    edl::torch::DistributedOptimizer opt(sgd, *net, oo);

    edl::data::ShardOptions so;  // the fixed schedule: micro-batches depend on (seed, epoch, step) only
    so.records = records;
    so.records_per_shard = 64;
    so.seed = std::stoull(args["seed"]);
    so.epochs = std::stoll(args["epochs"]);
    so.batch_size = std::stoull(args["micro-batch"]);
    so.micro_batches = std::stoull(args["micro-batches"]);
    so.deterministic = true;
    edl::data::ShardGenerator shards(so);

    edl::elastic::State state;
    edl::torch::register_state(state, *net, opt);
    state.register_component("shards", &shards);

    const auto norm = edl::data::fashion_mnist_normalization();
    const auto delay = std::chrono::duration<double, std::milli>(std::stod(args["step-delay-ms"]));
    edl::data::Batch batch;
    edl::elastic::run(state, [&] {
      net->train();
      for (;;) {
        edl::data::StepRecords rec = shards.next();
        if (rec.end_of_data) break;
        opt.set_epoch(rec.epoch);
        for (const edl::data::MicroBatch& mb : rec.micro_batches) {  // each one its own backward pass
          opt.begin_micro_batch(mb.size);
          edl::data::assemble_batch(*train, rec.records.data() + mb.begin, mb.size, norm,
                                    static_cast<uint64_t>(rec.epoch), &batch);
          auto x = torch::from_blob(batch.images.data(), {static_cast<int64_t>(mb.size), 1, 28, 28});
          auto y = torch::from_blob(batch.labels.data(), {static_cast<int64_t>(mb.size)}, torch::kInt32).to(torch::kLong);
          torch::nn::functional::cross_entropy(net->forward(x), y).backward();
        }
        opt.step();  // the exact mean over every micro-batch of every worker, then torch's SGD
        edl::notify_batch_end();
        if (edl::rank() == 0 && !args["step-log"].empty()) std::ofstream(args["step-log"], std::ios::app) << state.step << "\n";
        if (delay.count() > 0) std::this_thread::sleep_for(delay);
      }
    });
    if (edl::rank() == 0) {
      std::printf("trained %lld steps on %d worker(s)\nCHECKSUM %016llx\n", static_cast<long long>(state.step),
                  edl::size(), static_cast<unsigned long long>(checksum(*net)));
      std::fflush(stdout);
    }
    edl::shutdown();
    return 0;
  } catch (const edl::elastic::JobFailed& e) {
    std::fprintf(stderr, "edl-torch-reproducible: %s\n", e.what());
    edl::shutdown();
    return edl::elastic::kJobFailedExitCode;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "edl-torch-reproducible: %s\n", e.what());
    edl::shutdown();
    return 1;
  }
}
