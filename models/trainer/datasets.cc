// The trainer's datasets and its world-wide evaluation (see datasets.h).
#include "datasets.h"

#include <algorithm>

#include <edl/edl.h>
#include <edl/error.h>

namespace edl::trainer {

Datasets open_datasets(const TrainerOptions& o) {
  Datasets d;
  if (o.dataset == "fashion-mnist") {
    std::string dir = o.data_path.empty() ? data::kFashionMnistDir : o.data_path;
    d.train = data::open_fashion_mnist(dir, true);
    d.test = data::open_fashion_mnist(dir, false);
    d.norm = data::fashion_mnist_normalization();
  } else if (o.dataset == "cifar10") {
    if (o.data_path.empty()) throw InvalidArgument("--dataset cifar10 needs --data-path (directory with data_batch_*.bin)");
    std::vector<std::string> files;
    for (int i = 1; i <= 5; ++i) files.push_back(o.data_path + "/data_batch_" + std::to_string(i) + ".bin");
    d.train = data::open_cifar10(files);
    d.test = data::open_cifar10({o.data_path + "/test_batch.bin"});
    d.norm = data::cifar10_normalization(o.augment);
  } else {  // synthetic: one deterministic dataset, the last 20% held out for testing
    data::SyntheticOptions so;
    so.records = 12000;
    so.shape = {1, 28, 28};
    so.seed = o.seed;
    d.train = data::make_synthetic(so);
    d.test = d.train;
    d.norm = data::BatchOptions{};
  }
  uint64_t train_total = d.train->size();
  uint64_t test_total = d.test->size();
  if (o.dataset == "synthetic") {
    train_total = d.train->size() * 4 / 5;
    d.test_offset = train_total;
    test_total = d.train->size() - train_total;
  }
  d.train_n = o.train_records > 0 ? std::min<uint64_t>(o.train_records, train_total) : train_total;
  d.test_n = o.test_records > 0 ? std::min<uint64_t>(o.test_records, test_total) : test_total;
  d.norm.seed = o.seed;
  return d;
}

double evaluate(models::Model& model, const Datasets& d, const std::vector<models::BufferRef>& buffers,
                bool bn_trained, bool average_bn) {
  // Batch-norm running statistics differ slightly between workers: evaluate with their average over
  // the workers whose statistics saw training batches (a worker that got no shard yet keeps the
  // initial mean 0 / variance 1, which must not dilute the others').
  double weight = bn_trained ? 1.0 : 0.0;
  if (average_bn) edl::allreduce(&weight, 1, ReduceOp::kSum, "eval.bn_weight");
  for (const auto& b : average_bn ? buffers : std::vector<models::BufferRef>{}) {
    if (weight > 0 && !bn_trained) std::fill(b.data, b.data + b.count, 0.0f);
    edl::allreduce(b.data, b.count, ReduceOp::kSum, "eval." + b.name);
    if (weight > 0) for (size_t i = 0; i < b.count; ++i) b.data[i] /= static_cast<float>(weight);
  }
  const int r = edl::rank(), n = edl::size();
  std::vector<uint64_t> mine;
  for (uint64_t i = static_cast<uint64_t>(r); i < d.test_n; i += static_cast<uint64_t>(n)) mine.push_back(d.test_offset + i);
  data::Batch batch;
  std::vector<int32_t> pred;
  int64_t counts[2] = {0, static_cast<int64_t>(mine.size())};
  const size_t kEvalBatch = 200;
  for (size_t s = 0; s < mine.size(); s += kEvalBatch) {
    size_t m = std::min(kEvalBatch, mine.size() - s);
    data::BatchOptions eval_norm = d.norm;
    eval_norm.augment = false;
    data::assemble_batch(*d.test, mine.data() + s, m, eval_norm, 0, &batch);
    pred.resize(m);
    model.predict(batch.images.data(), static_cast<int>(m), pred.data());
    for (size_t i = 0; i < m; ++i) counts[0] += pred[i] == batch.labels[i];
  }
  edl::allreduce(counts, 2, ReduceOp::kSum, "eval.counts");
  return counts[1] > 0 ? static_cast<double>(counts[0]) / static_cast<double>(counts[1]) : 0.0;
}

}  // namespace edl::trainer
