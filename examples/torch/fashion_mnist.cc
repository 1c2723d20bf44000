// edl-torch-fashion-mnist: a libtorch ResNet20 trained elastically on Fashion-MNIST with edl::torch
// (docs/torch.md walks through it). Run it under edl-run; kill, add or remove workers at any time:
//   edl-run --min-np 1 --max-np 3 -np 2 build/examples/edl-torch-fashion-mnist --epochs 3
// scripts/torch-job.sh runs it with a kill -9 and a join and compares the test accuracy with a run
// without failures. Options: --epochs E (3) --train-records N (30000) --test-records N (10000)
// --batch B (global batch, 64) --lr LR (0.05, cosine-decayed to 0) --threads T (1) --seed S (1) --data DIR
// --device cpu|cuda (cpu; cuda: model, data and gradient reduction on the GPU, NCCL between workers;
// on one GPU run several workers with edl-run --one-gpu-test).
// Prints "final test accuracy: X%" on rank 0 and, on every worker that finished, a checksum of its
// parameters' bytes (the same on all of them: scripts/torch-job.sh compares them).
#include <edl/data.h>
#include <edl/edl.h>
#include <edl/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "resnet20.h"

namespace {

std::map<std::string, std::string> parse(int argc, char** argv) {
  std::map<std::string, std::string> args = {{"epochs", "3"},     {"train-records", "30000"},
                                             {"test-records", "10000"}, {"batch", "64"},
                                             {"lr", "0.05"},      {"threads", "1"},
                                             {"seed", "1"},       {"data", edl::data::kFashionMnistDir},
                                             {"device", "cpu"}};
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string key = argv[i];
    if (key.rfind("--", 0) != 0 || !args.count(key.substr(2))) throw edl::InvalidArgument("unknown option " + key);
    args[key.substr(2)] = argv[i + 1];
  }
  return args;
}

// Accuracy (percent) of `net` on the first `records` test images.
double test_accuracy(edl_examples::ResNet20& net, const edl::data::Dataset& test, size_t records,
                     const torch::Device& device) {
  torch::NoGradGuard no_grad;
  net->eval();
  const auto norm = edl::data::fashion_mnist_normalization();
  edl::data::Batch batch;
  std::vector<uint64_t> idx;
  size_t correct = 0;
  for (size_t begin = 0; begin < records; begin += 500) {
    const size_t n = std::min<size_t>(500, records - begin);
    idx.resize(n);
    for (size_t i = 0; i < n; ++i) idx[i] = begin + i;
    edl::data::assemble_batch(test, idx.data(), n, norm, 0, &batch);
    auto x = torch::from_blob(batch.images.data(), {static_cast<int64_t>(n), 1, 28, 28}).to(device);
    auto y = torch::from_blob(batch.labels.data(), {static_cast<int64_t>(n)}, torch::kInt32).to(device, torch::kLong);
    correct += static_cast<size_t>(net->forward(x).argmax(1).eq(y).sum().item<int64_t>());
  }
  net->train();
  return 100.0 * static_cast<double>(correct) / static_cast<double>(records);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    auto args = parse(argc, argv);
    edl::init();  // joins the job edl-run started (elastic with --min-np/--max-np), or a world of 1
    torch::set_num_threads(std::stoi(args["threads"]));
    torch::manual_seed(std::stoull(args["seed"]));  // the elastic State syncs the members anyway
    auto train = edl::data::open_fashion_mnist(args["data"], true);
    auto test = edl::data::open_fashion_mnist(args["data"], false);
    const uint64_t records = std::min<uint64_t>(std::stoull(args["train-records"]), train->size());
    const size_t test_records = std::min<size_t>(std::stoull(args["test-records"]), test->size());

    const torch::Device device = edl::torch::training_device(args["device"]);
    edl_examples::ResNet20 net(1, 10);
    net->to(device);  // before the optimizer takes the parameters
    torch::optim::SGD sgd(net->parameters(),
                          torch::optim::SGDOptions(std::stod(args["lr"])).momentum(0.9).weight_decay(5e-4));
    // A fixed global batch split over however many workers there are (so no LR rescaling), and a
    // cosine LR schedule over the optimizer steps, which EDL applies to the param groups.
    edl::torch::DistributedOptimizerOptions oo;
    oo.scaling.lr_scaling = edl::optim::LrScaling::kNone;
    oo.scaling.batch.mode = edl::optim::BatchMode::kFixedGlobal;
    oo.scaling.batch.global_batch = std::stoi(args["batch"]);
    const double lr = std::stod(args["lr"]);
    const double total = std::stod(args["epochs"]) * std::ceil(records / std::stod(args["batch"]));
    oo.scaling.schedule = [lr, total](int64_t, int64_t step) {
      return lr * 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, static_cast<double>(step) / total)));
    };
    edl::torch::DistributedOptimizer opt(sgd, *net, oo);

    edl::data::ShardOptions so;  // every record of every epoch trained exactly once, whatever happens
    so.records = records;
    so.records_per_shard = 512;
    so.seed = std::stoull(args["seed"]);
    so.epochs = std::stoll(args["epochs"]);
    so.batch_size = static_cast<uint64_t>(oo.scaling.batch.global_batch);
    so.batch_for_size = [&](int size) {
      return static_cast<uint64_t>(edl::optim::plan_batch(oo.scaling.batch, size).local_batch);
    };
    edl::data::ShardGenerator shards(so);

    edl::elastic::State state;
    edl::torch::register_state(state, *net, opt);  // parameters, BN buffers, momentum, LR, rescaler
    state.register_component("shards", &shards);

    const auto norm = edl::data::fashion_mnist_normalization();
    edl::data::Batch batch;
    const auto outcome = edl::elastic::run(state, [&] {
      net->train();
      for (;;) {
        edl::data::StepRecords rec = shards.next();  // every member calls it once per step
        if (rec.end_of_data) break;
        opt.set_epoch(rec.epoch);
        opt.zero_grad();
        const size_t n = rec.records.size();
        opt.set_step_samples(n);  // weighted mean: short and empty batches count right
        if (n > 0) {
          edl::data::assemble_batch(*train, rec.records.data(), n, norm, static_cast<uint64_t>(rec.epoch), &batch);
          auto x = torch::from_blob(batch.images.data(), {static_cast<int64_t>(n), 1, 28, 28}).to(device);
          auto y = torch::from_blob(batch.labels.data(), {static_cast<int64_t>(n)}, torch::kInt32)
                       .to(device, torch::kLong);
          torch::nn::functional::cross_entropy(net->forward(x), y).backward();  // hooks start the allreduce
        }
        opt.step();  // waits, averages, torch SGD step
        if (edl::rank() == 0 && state.step % 50 == 0) {
          std::printf("step %lld epoch %lld workers %d lr %.4f\n", static_cast<long long>(state.step),
                      static_cast<long long>(rec.epoch + 1), edl::size(), sgd.param_groups()[0].options().get_lr());
          std::fflush(stdout);
        }
        edl::notify_batch_end();  // commit; joins and graceful leaves happen here
      }
    });

    // kLeft: this worker left the job (SIGTERM) and the others train on: it has no final model.
    if (outcome == edl::elastic::RunOutcome::kFinished) {  // FNV-1a of the parameters' bytes
      uint64_t h = 1469598103934665603ull;
      for (const auto& p : net->parameters()) {
        const auto c = p.detach().to(torch::kCPU).contiguous();
        const auto* b = static_cast<const unsigned char*>(c.data_ptr());
        for (size_t i = 0; i < c.nbytes(); ++i) h = (h ^ b[i]) * 1099511628211ull;
      }
      std::printf("rank %d parameters checksum %016llx\n", edl::rank(), static_cast<unsigned long long>(h));
    }
    if (outcome == edl::elastic::RunOutcome::kFinished && edl::rank() == 0) {
      const double acc = test_accuracy(net, *test, test_records, device);
      std::printf("trained %s epochs in %lld steps on %d worker(s)\n", args["epochs"].c_str(),
                  static_cast<long long>(state.step), edl::size());
      std::printf("final test accuracy: %.2f%%\n", acc);
      std::fflush(stdout);
    }
    edl::shutdown();
    return 0;
  } catch (const edl::elastic::JobFailed& e) {  // a MismatchError, DataError, ... on some member
    std::fprintf(stderr, "edl-torch-fashion-mnist: %s\n", e.what());
    edl::shutdown();
    return edl::elastic::kJobFailedExitCode;
  } catch (const edl::Error& e) {  // JobError (reset limit, below --min-np), StoreError, ...
    std::fprintf(stderr, "edl-torch-fashion-mnist: %s\n", e.what());
    edl::shutdown();
    return 1;
  }
}
