// store_bench: control-plane latency of the Store backends.
//
//   store_bench [--backends tcp,redis,memory,etcd] [--iters 2000] [--workers 16] [--reps 5] [--json PATH]
//
// Table 1 — round trip of one operation from one client (rows {"bench":"store_rtt","backend","op",
// "clients","p50_us","p99_us","ops_per_s","wrong"}); "wrong" counts replies that differ from the
// expected value (every run checks correctness).
// Table 2 — a rendezvous-shaped round of N workers (threads, one connection each): every worker
// add()s itself to an arrival counter; the last one publishes the member list; everybody
// wait()s for it and reads it (rows {"bench":"store_rendezvous","backend","workers","time_ms",
// "wrong"}; time from the start of the round until the last worker holds the list). It measures the
// store's share of a rendezvous (O(1) round trips per worker), not the full elastic protocol
// (elastic_bench "rerendezvous" rows do).
// Table 3 (--leases N,...) — the steady load of N workers' leases (bench/store_leases.h: N
// elastic::Membership instances in one generation, each with its own connection and its beat
// thread's, at the default heartbeat 500 ms / lease 3 s): rows {"bench":"store_leases","backend",
// "leases","rendezvous_ms","ops_per_s","server_cpu_pct","failures"}; ops and CPU are the server's
// own (the embedded server's requests and loop thread; redis-server's total_commands_processed and
// process; the etcd members' grpc_server_msg_received_total and processes); "failures" counts members
// reported dead although none died (must be 0).
// The redis backend starts a private redis-server, the etcd backend a private 3-member etcd cluster
// (each skipped when not installed; etcd is not in the default list).
#include <atomic>
#include <algorithm>
#include <functional>
#include <cstdio>
#include <cxxopts.hpp>
#include <memory>
#include <sstream>
#include <thread>

#include "common/bench_util.h"
#include "edl/store.h"
#include "store_leases.h"
#include "testing/process.h"
#include "edl/store_server.h"
#include "testing/etcd_cluster.h"
#include "testing/redis_server.h"

using namespace edl::bench;
using Clock = std::chrono::steady_clock;

namespace {

struct Backend {
  std::string name;
  std::function<std::shared_ptr<edl::Store>()> connect;
  // The server's requests served so far and its CPU time in ms (null: not measurable, e.g. memory).
  std::function<std::pair<double, double>()> counters;
};

// Sum of the samples of one Prometheus counter in a /metrics text.
double metric_sum(const std::string& text, const std::string& name) {
  double sum = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(name, 0) == 0 && (line[name.size()] == '{' || line[name.size()] == ' '))
      sum += std::stod(line.substr(line.rfind(' ') + 1));
  return sum;
}

double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

void rtt_rows(const Backend& b, int iters, Table& t, JsonRows& json) {
  auto s = b.connect();
  s->set("bench/k", "value");
  struct Op {
    const char* name;
    std::function<bool(int)> run;  // returns whether the reply was right
  };
  std::vector<Op> ops = {
      {"get", [&](int) { return s->get("bench/k") == std::optional<std::string>("value"); }},
      {"set", [&](int i) { s->set("bench/s", std::to_string(i)); return true; }},
      {"add", [&](int i) { return s->add("bench/n", 1) == i + 1; }},
      {"compare_set", [&](int i) {
         return s->compare_set("bench/g", i == 0 ? std::nullopt : std::optional<std::string>(std::to_string(i)),
                               std::to_string(i + 1));
       }},
      {"wait(present)", [&](int) { return s->wait({"bench/k"}, std::chrono::milliseconds(1000)); }},
  };
  for (auto& op : ops) {
    std::vector<double> lat;
    lat.reserve(iters);
    int64_t wrong = 0;
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) {
      auto a = Clock::now();
      if (!op.run(i)) ++wrong;
      lat.push_back(us_since(a));
    }
    double total_s = us_since(t0) / 1e6;
    double p50 = median(lat), p99 = quantile(lat, 0.99);
    t.row({b.name, op.name, "1", fmt(p50, 1), fmt(p99, 1), fmt(iters / total_s, 0), std::to_string(wrong)});
    json.write(Json{{"bench", "store_rtt"}, {"backend", b.name}, {"op", op.name}, {"clients", 1}, {"p50_us", p50},
                    {"p99_us", p99}, {"ops_per_s", iters / total_s}, {"wrong", wrong}});
  }
}

// One rendezvous-shaped round; returns ms until every worker holds the member list, counts errors.
double rendezvous_round(const std::vector<std::shared_ptr<edl::Store>>& clients, int round, int64_t* wrong) {
  int n = static_cast<int>(clients.size());
  std::string base = "rdzv/" + std::to_string(round) + "/";
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<double> done_ms(n, 0);
  std::atomic<int64_t> bad{0};
  Clock::time_point t0;
  std::vector<std::thread> ts;
  for (int w = 0; w < n; ++w) {
    ts.emplace_back([&, w] {
      auto& s = clients[w];
      ++ready;
      while (!go.load()) std::this_thread::yield();
      s->set(base + "in/" + std::to_string(w), "host");
      int64_t arrived = s->add(base + "n", 1);
      if (arrived == n) {  // the last arrival decides
        auto in = s->keys(base + "in/");
        std::string members;
        for (auto& k : in) members += k.substr(k.rfind('/') + 1) + "\n";
        s->set(base + "members", members);
      }
      if (!s->wait({base + "members"}, std::chrono::seconds(10))) ++bad;
      auto m = s->get(base + "members");
      if (!m || std::count(m->begin(), m->end(), '\n') != n) ++bad;
      done_ms[w] = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    });
  }
  while (ready.load() < n) std::this_thread::yield();
  t0 = Clock::now();
  go = true;
  for (auto& t : ts) t.join();
  *wrong += bad.load();
  return *std::max_element(done_ms.begin(), done_ms.end());
}

// Table 3: the lease load of each size on each backend that can count its requests. Returns the
// exit status (1 when a member was reported dead although none died).
int lease_rows(const std::vector<Backend>& backends, const std::string& sizes, double seconds, JsonRows& json) {
  if (split(sizes).empty()) return 0;
  std::printf("\n");
  Table t({"backend", "leases", "rendezvous_ms", "ops_per_s", "server_cpu_%", "failures"});
  t.header();
  int rc = 0;
  for (const auto& b : backends) {
    if (!b.counters) continue;
    for (const auto& item : split(sizes)) {
      const int n = std::stoi(item);
      LeaseLoad l = lease_load(b.connect, n, seconds, b.counters);
      t.row({b.name, std::to_string(n), fmt(l.rendezvous_ms, 0), fmt(l.ops_per_s, 0), fmt(l.cpu_pct, 1),
             std::to_string(l.failures)});
      json.write(Json{{"bench", "store_leases"}, {"backend", b.name}, {"leases", n}, {"rendezvous_ms", l.rendezvous_ms},
                      {"ops_per_s", l.ops_per_s}, {"server_cpu_pct", l.cpu_pct}, {"failures", l.failures}});
      if (l.failures > 0) rc = 1;
    }
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options opts("store_bench", "Latency of the EDL store backends");
  opts.add_options()
    ("backends", "comma list of tcp, redis, memory, etcd", cxxopts::value<std::string>()->default_value("tcp,redis,memory"))
    ("iters", "operations per latency row", cxxopts::value<int>()->default_value("2000"))
    ("workers", "comma list of rendezvous sizes", cxxopts::value<std::string>()->default_value("2,4,8,16"))
    ("reps", "rendezvous rounds per size (median reported)", cxxopts::value<int>()->default_value("5"))
    ("leases", "comma list of lease-load sizes (workers; e.g. 256,1024; empty = skip)", cxxopts::value<std::string>()->default_value(""))
    ("lease-seconds", "steady-state window of each lease-load row", cxxopts::value<double>()->default_value("10"))
    ("json", "write JSON rows to PATH", cxxopts::value<std::string>()->default_value(""))
    ("h,help", "help");
  cxxopts::ParseResult a;
  try {
    a = opts.parse(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "store_bench: %s\n%s\n", e.what(), opts.help().c_str());
    return 2;
  }
  if (a.count("help")) {
    std::printf("%s\n", opts.help().c_str());
    return 0;
  }
  for (const auto& item : split(a["leases"].as<std::string>())) {
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    if (*end != '\0' || v < 1 || v > 100000) {
      std::fprintf(stderr, "store_bench: --leases wants worker counts of at least 1, got '%s'\n", item.c_str());
      return 2;
    }
  }
  if (!(a["lease-seconds"].as<double>() > 0)) {
    std::fprintf(stderr, "store_bench: --lease-seconds must be positive\n");
    return 2;
  }
  JsonRows json(a["json"].as<std::string>());
  int iters = a["iters"].as<int>(), reps = a["reps"].as<int>();

  std::unique_ptr<edl::StoreServer> server;
  std::unique_ptr<edl::testing::RedisServer> redis;
  std::unique_ptr<edl::testing::EtcdCluster> etcd;
  auto memory = edl::make_memory_store();
  std::vector<Backend> backends;
  std::stringstream ss(a["backends"].as<std::string>());
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item == "tcp") {
      server = std::make_unique<edl::StoreServer>(edl::StoreServerOptions{"127.0.0.1", 0, "bench-secret"});
      std::string url = server->url();
      auto* srv = server.get();
      backends.push_back({"tcp",
                          [url] {
                            edl::StoreOptions o;
                            o.secret = "bench-secret";
                            return edl::connect_store(url, o);
                          },
                          [srv] {
                            return std::make_pair(static_cast<double>(srv->request_count()), srv->cpu_time().count() / 1e6);
                          }});
    } else if (item == "redis") {
      redis = std::make_unique<edl::testing::RedisServer>("bench-secret");
      if (!redis->available()) {
        std::printf("store_bench: redis-server is not installed; skipping the redis backend\n");
        continue;
      }
      std::string url = redis->url();
      auto* rs = redis.get();
      backends.push_back({"redis",
                          [url] {
                            edl::StoreOptions o;
                            o.secret = "bench-secret";
                            return edl::connect_store(url, o);
                          },
                          [rs] { return std::make_pair(rs->commands_processed(), std::max(0.0, cpu_ms_of(rs->pid()))); }});
    } else if (item == "etcd") {
      etcd = std::make_unique<edl::testing::EtcdCluster>(3);
      if (!etcd->available()) {
        std::printf("store_bench: etcd is not installed; skipping the etcd backend\n");
        continue;
      }
      std::string url = etcd->url();
      auto* ec = etcd.get();
      backends.push_back({"etcd", [url] { return edl::connect_store(url); },
                          [ec] {
                            double req = 0, cpu = 0;
                            for (int i = 0; i < ec->size(); ++i) {
                              req += metric_sum(ec->metrics(i), "grpc_server_msg_received_total");
                              cpu += std::max(0.0, cpu_ms_of(ec->pid(i)));
                            }
                            return std::make_pair(req, cpu);
                          }});
    } else if (item == "memory") {
      backends.push_back({"memory", [memory] { return memory; }, nullptr});
    } else {
      std::fprintf(stderr, "store_bench: unknown backend '%s' (tcp, redis, memory, etcd)\n", item.c_str());
      return 2;
    }
  }

  Table t({"backend", "op", "clients", "p50_us", "p99_us", "ops_per_s", "wrong"});
  t.header();
  for (const auto& b : backends) rtt_rows(b, iters, t, json);

  std::printf("\n");
  Table t2({"backend", "workers", "time_ms", "wrong"});
  t2.header();
  for (const auto& b : backends) {
    std::stringstream ws(a["workers"].as<std::string>());
    int round = 0;
    while (std::getline(ws, item, ',')) {
      int n = std::stoi(item);
      std::vector<std::shared_ptr<edl::Store>> clients;
      for (int i = 0; i < n; ++i) clients.push_back(b.connect());
      std::vector<double> times;
      int64_t wrong = 0;
      for (int r = 0; r < reps; ++r) times.push_back(rendezvous_round(clients, round++, &wrong));
      double m = median(times);
      t2.row({b.name, std::to_string(n), fmt(m, 2), std::to_string(wrong)});
      json.write(Json{{"bench", "store_rendezvous"}, {"backend", b.name}, {"workers", n}, {"time_ms", m},
                      {"wrong", wrong}});
    }
  }
  return lease_rows(backends, a["leases"].as<std::string>(), a["lease-seconds"].as<double>(), json);
}
