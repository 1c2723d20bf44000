#include "store_leases.h"

#include <atomic>
#include <chrono>
#include <future>
#include <random>
#include <thread>
#include <vector>

#include "elastic/membership.h"

namespace edl::bench {

using Clock = std::chrono::steady_clock;
using elastic::GenerationView;
using elastic::Membership;

LeaseLoad lease_load(const std::function<std::shared_ptr<Store>()>& connect, int members, double seconds,
                     const std::function<std::pair<double, double>()>& counters) {
  LeaseLoad out;
  const std::string job = "leases" + std::to_string(members) + "-" + std::to_string(std::random_device{}());
  std::vector<std::unique_ptr<Membership>> ms;
  for (int i = 0; i < members; ++i) {
    elastic::MembershipOptions o;
    o.job_id = job;
    o.worker_id = "w" + std::to_string(i);
    o.min_np = o.max_np = members;
    o.rendezvous_timeout = std::chrono::seconds(300);
    o.start_window = std::chrono::milliseconds(200);
    o.beat_store = connect();  // as a worker: its own connection for the beats
    ms.push_back(std::make_unique<Membership>(connect(), o));
  }
  std::atomic<int64_t> failures{0};
  const auto t0 = Clock::now();
  std::vector<std::future<GenerationView>> f;
  for (auto& m : ms) f.push_back(std::async(std::launch::async, [&m] { return m->rendezvous(nullptr); }));
  std::vector<GenerationView> views;
  for (auto& x : f) views.push_back(x.get());
  out.rendezvous_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  for (const auto& v : views)
    if (v.size != members || v.id != views[0].id) ++failures;
  for (size_t i = 0; i < ms.size(); ++i) {
    ms[i]->watch(views[i], [&](const std::string&) { ++failures; });
    ms[i]->built();  // as after the communicator's connect: training, no more probes
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));  // the watches settle into their rhythm
  auto c0 = counters();
  const auto w0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  auto c1 = counters();
  const double dt = std::chrono::duration<double>(Clock::now() - w0).count();
  out.ops_per_s = (c1.first - c0.first) / dt;
  out.cpu_pct = (c1.second - c0.second) / dt / 10.0;
  for (auto& m : ms) m->unwatch();
  out.failures = failures.load();
  // Leave in parallel: each stop() joins threads that may sit in a wait of up to a heartbeat.
  std::vector<std::thread> stoppers;
  const size_t per = 64;
  for (size_t from = 0; from < ms.size(); from += per)
    stoppers.emplace_back([&, from] {
      for (size_t i = from; i < std::min(ms.size(), from + per); ++i) ms[i].reset();
    });
  for (auto& t : stoppers) t.join();
  return out;
}

}  // namespace edl::bench
