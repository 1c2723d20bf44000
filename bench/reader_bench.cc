// reader_bench: how fast the data layer delivers training batches.
//
// Rows (one per dataset x mode): images/s delivered to the training thread for one shuffled epoch,
// median of --repeats runs. The whole process is pinned to ONE core (the prefetch thread and the
// consumer share it), the setting of the target (>= 20,000 images/s on Fashion-MNIST, batch 64).
// Every batch is checked against the dataset (labels and a pixel per record): the "wrong" column.
//   mode prefetch  Prefetcher (background thread, bounded queue) — what training loops use
//   mode inline    assemble_batch on the training thread (no overlap possible)
// A second table: the shard dispatcher's own cost per training step and per commit (next() / save())
// over the in-memory store and the embedded TCP store, 4 workers in lockstep (threads), 1 commit per
// step (EDL_COMMIT_EVERY=1, the default) — rows {"bench":"dispatcher","store","workers",
// "us_per_next","us_per_commit","wrong"}.
//   mode shard-loader  ShardLoader: the elastic shard dispatcher (memory store, 1 worker, 512 records per
//                  shard) + prefetching — the full path of an elastic training loop
#include <sched.h>

#include <cstdio>
#include <cxxopts.hpp>
#include <iostream>

#include "common/bench_util.h"
#include "data/random.h"
#include "edl/data.h"
#include "edl/store_server.h"

using namespace edl;
using namespace edl::bench;

namespace {

cpu_set_t g_original_cpus;

int pin_to_one_core() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return -1;
  g_original_cpus = set;
  int cpu = -1;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) {
      cpu = c;
      break;
    }
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof set, &set) == 0 ? cpu : -1;
}

struct Result {
  double images_per_s;
  size_t wrong;
};

size_t check_batch(const data::Dataset& ds, const data::Batch& b, const data::BatchOptions& o) {
  size_t wrong = 0, px = ds.shape().pixels();
  for (size_t i = 0; i < b.size; ++i) {
    bool ok = b.labels[i] == ds.label(b.indices[i]);
    if (!o.augment) {
      float mean = o.mean.empty() ? 0.f : o.mean[0], sd = o.std.empty() ? 1.f : o.std[0];
      float want = (ds.pixels(b.indices[i])[px / 2] / 255.f - mean) / sd;
      ok = ok && std::abs(b.images[i * px + px / 2] - want) < 1e-5f;
    }
    wrong += !ok;
  }
  return wrong;
}

enum class Mode { kPrefetch, kInline, kShardLoader };

Result run_epoch(const std::shared_ptr<data::Dataset>& ds, const data::BatchOptions& o, size_t batch, Mode mode,
                 uint64_t seed) {
  std::vector<uint64_t> order = data::detail::permutation(ds->size(), seed);
  data::Batch b;
  size_t wrong = 0, images = 0;
  double t0 = now_s();
  if (mode == Mode::kShardLoader) {
    data::ShardOptions so;
    so.records = ds->size();
    so.records_per_shard = 512;
    so.batch_size = batch;
    so.seed = seed;
    so.epochs = 1;
    data::ShardGenerator shards(make_memory_store(), so);
    data::ShardLoader loader(ds, shards, o, 8);
    for (;;) {
      data::StepRecords s = loader.next(&b);
      if (s.end_of_data) break;
      wrong += check_batch(*ds, b, o) + (b.indices != s.records);
      images += b.size;
    }
  } else if (mode == Mode::kPrefetch) {
    data::Prefetcher p(ds, o, 8);
    p.submit_all(order, batch, seed);
    while (p.next(&b)) {
      wrong += check_batch(*ds, b, o);
      images += b.size;
    }
  } else {
    for (size_t i = 0; i < order.size(); i += batch) {
      size_t n = std::min(batch, order.size() - i);
      data::assemble_batch(*ds, order.data() + i, n, o, seed, &b);
      wrong += check_batch(*ds, b, o);
      images += b.size;
    }
  }
  double dt = now_s() - t0;
  if (images != ds->size()) ++wrong;
  return {images / dt, wrong};
}

struct DispatcherCost {
  double us_per_next = 0, us_per_commit = 0;
  size_t wrong = 0;
};

// `workers` generators on one store; every step each calls next() (timed) then save() (timed).
DispatcherCost dispatcher_cost(std::shared_ptr<Store> store, int workers) {
  const uint64_t N = 60000;
  std::vector<std::unique_ptr<data::ShardGenerator>> gens;
  for (int w = 0; w < workers; ++w) {
    data::ShardOptions o;
    o.records = N;
    o.records_per_shard = 512;
    o.batch_size = 64;
    o.epochs = 1;
    o.worker_id = "w" + std::to_string(w);
    gens.push_back(std::make_unique<data::ShardGenerator>(store, o));
  }
  std::vector<uint8_t> seen(N, 0);
  double t_next = 0, t_commit = 0;
  size_t nexts = 0, commits = 0, wrong = 0;
  for (;;) {
    bool end = false;
    for (auto& g : gens) {
      double t0 = now_s();
      data::StepRecords s = g->next();
      t_next += now_s() - t0;
      ++nexts;
      end = s.end_of_data;
      for (uint64_t r : s.records) wrong += seen[r]++ != 0;
    }
    if (end) break;
    for (auto& g : gens) {
      double t0 = now_s();
      g->save();
      t_commit += now_s() - t0;
      ++commits;
    }
  }
  for (uint8_t c : seen) wrong += c != 1;
  return {t_next / nexts * 1e6, t_commit / commits * 1e6, wrong};
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options opts("reader_bench", "Dataset reader + prefetch throughput on one core");
  opts.add_options()("dir", "Fashion-MNIST directory", cxxopts::value<std::string>()->default_value(data::kFashionMnistDir))(
      "batch", "batch size", cxxopts::value<size_t>()->default_value("64"))(
      "repeats", "epochs per row (median reported)", cxxopts::value<int>()->default_value("3"))(
      "json", "append JSON rows to PATH", cxxopts::value<std::string>()->default_value(""))("h,help", "help");
  auto args = edl::bench::parse_flags(opts, argc, argv);
  if (args.count("help")) {
    std::cout << opts.help() << "\n";
    return 0;
  }
  const size_t batch = args["batch"].as<size_t>();
  const int repeats = std::max(1, args["repeats"].as<int>());
  JsonRows json(args["json"].as<std::string>());
  int cpu = pin_to_one_core();
  std::printf("reader_bench: pinned to cpu %d (one core for loader + consumer), batch %zu, %d epochs per row\n", cpu,
              batch, repeats);

  struct Case {
    std::string dataset;
    std::shared_ptr<data::Dataset> ds;
    data::BatchOptions options;
  };
  std::vector<Case> cases;
  try {
    double t0 = now_s();
    cases.push_back({"fashion-mnist", data::open_fashion_mnist(args["dir"].as<std::string>(), true),
                     data::fashion_mnist_normalization()});
    std::printf("opened fashion-mnist/train (60000 x 28x28, gunzip + validate) in %.2f s\n", now_s() - t0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "skipping fashion-mnist: %s\n", e.what());
  }
  data::SyntheticOptions so;
  so.records = 20000;
  so.shape = {3, 32, 32};
  cases.push_back({"synthetic-cifar-augment", data::make_synthetic(so), data::cifar10_normalization(true)});

  Table table({"dataset", "mode", "batch", "images/s", "wrong"}, 24);
  table.header();
  int failures = 0;
  for (const Case& c : cases) {
    for (Mode m : {Mode::kPrefetch, Mode::kInline, Mode::kShardLoader}) {
      std::vector<double> rates;
      size_t wrong = 0;
      for (int r = 0; r < repeats; ++r) {
        Result res = run_epoch(c.ds, c.options, batch, m, 1000 + r);
        rates.push_back(res.images_per_s);
        wrong += res.wrong;
      }
      double rate = median(rates);
      const char* mode = m == Mode::kPrefetch ? "prefetch" : m == Mode::kInline ? "inline" : "shard-loader";
      table.row({c.dataset, mode, std::to_string(batch), fmt(rate, 0), std::to_string(wrong)});
      json.write({{"bench", "reader"}, {"dataset", c.dataset}, {"mode", mode}, {"batch", batch},
                  {"images_per_s", rate}, {"cores", 1}, {"wrong", wrong}});
      failures += wrong != 0;
    }
  }
  std::printf("\nshard dispatcher cost per step (one epoch of 60000 records, 512 per shard, batch 64, 4 workers;"
              " not pinned)\n");
  Table dt({"store", "workers", "us/next", "us/commit", "wrong"}, 14);
  dt.header();
  sched_setaffinity(0, sizeof g_original_cpus, &g_original_cpus);  // the store server gets its own core
  StoreServer server;
  for (std::string kind : {"memory", "tcp"}) {
    auto store = kind == "memory" ? make_memory_store() : connect_store(server.url());
    DispatcherCost c = dispatcher_cost(make_prefix_store(store, "bench/data/"), 4);
    dt.row({kind, "4", fmt(c.us_per_next, 1), fmt(c.us_per_commit, 1), std::to_string(c.wrong)});
    json.write({{"bench", "dispatcher"}, {"store", kind}, {"workers", 4}, {"us_per_next", c.us_per_next},
                {"us_per_commit", c.us_per_commit}, {"wrong", c.wrong}});
    failures += c.wrong != 0;
  }
  return failures == 0 ? 0 : 1;
}
