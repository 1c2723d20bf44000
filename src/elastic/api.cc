// The process-wide elastic worker behind edl::elastic::run / edl::notify_batch_end, wired into the
// Runtime (src/runtime/runtime.cc calls start_elastic / stop_elastic).
#include "elastic/api.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <mutex>

#include "collective/engine.h"
#include "common/logging.h"
#include "collective/runtime_state.h"
#include "edl/elastic.h"
#include "edl/error.h"
#include "elastic/keys.h"
#include "elastic/launcher_link.h"
#include "elastic/timed_store.h"
#include "elastic/worker.h"
#include "elastic/worker_metrics.h"

namespace edl::elastic {
namespace {

// The Runtime's generation as a Group: collectives go through the generation's engine so they
// never race the engine thread on the communicator.
class RuntimeGroup final : public Group {
 public:
  explicit RuntimeGroup(std::shared_ptr<edl::detail::Generation> gen) : gen_(std::move(gen)) {}
  int rank() const override { return gen_->rank; }
  int size() const override { return gen_->size; }
  void allreduce(void* d, size_t n, DataType t, ReduceOp op) override {
    gen_->engine->allreduce(d, n, t, op, "edl.elastic.allreduce", true).wait();
  }
  void broadcast(void* d, size_t n, DataType t, int root) override {
    gen_->engine->broadcast(d, n, t, root, "edl.elastic.broadcast", true).wait();
  }
  void allgatherv(const void* in, size_t n, DataType t, std::vector<uint8_t>& out,
                  std::vector<size_t>* counts) override {
    gen_->engine->allgather(in, n, t, &out, counts, "edl.elastic.allgather", true).wait();
  }
  std::function<void()> allreduce_max_async(int64_t* values, size_t count) override {
    Handle h = gen_->engine->allreduce(values, count, DataType::kInt64, ReduceOp::kMax, "edl.elastic.flag");
    return [h] { h.wait(); };
  }
  void abort(const std::string& reason) override { gen_->comm->abort(reason); }
  std::shared_ptr<Communicator> communicator() const override { return gen_->comm; }

 private:
  std::shared_ptr<edl::detail::Generation> gen_;
};

std::mutex g_mu;
std::shared_ptr<Worker> g_worker;
State* g_static_state = nullptr;  // static (non-elastic) world: the State inside run()
int g_static_since_commit = 0;
int g_commit_every = 1;
std::atomic<int64_t> g_local_batch{0};  // set_samples_per_batch, for a Worker created later

std::shared_ptr<Worker> worker() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_worker;
}

// After run() in an elastic job: a worker that left (or whose run threw) is no longer a member of any
// generation. Its generation is replaced by a "departed" one (rank -1, size 0, no engine): rank() and
// size() say so, and a collective throws InvalidArgument instead of talking to a generation that went
// on without it (include/edl/elastic.h, "After run").
void depart(uint64_t last_generation) {
  auto gone = std::make_shared<edl::detail::Generation>();
  gone->id = last_generation;
  gone->rank = -1;
  gone->size = 0;
  gone->local_rank = -1;
  gone->local_size = 0;
  edl::detail::Runtime::instance().set_generation(std::move(gone));
}

RunOutcome run_elastic(Worker& w, State& state, const std::function<void()>& fn) {
  RunOutcome outcome;
  try {
    outcome = w.run(state, fn);
  } catch (...) {
    depart(w.view().id);
    throw;
  }
  if (outcome != RunOutcome::kFinished) depart(w.view().id);
  return outcome;
}

// Whether the job has a generation and has not finished: a worker starting now joins a running job.
bool job_running(Store& store, const std::string& job) {
  const Keys k(job);
  return store.get(k.gen()).has_value() && !store.get(k.finished()).has_value();
}

bool request_leave_if_running() {
  auto w = worker();
  if (!w || !w->in_run()) return false;
  w->request_leave();
  return true;
}

// A program that ends (returns from main, calls exit) without edl::shutdown() — typically after run()
// threw — used to have g_worker destroyed by the static destructors, unlocked, while the launcher
// link's thread could be copying it for a SIGTERM: two threads destroyed the Worker and the process
// aborted ("terminate called without an active exception"). exit() runs this handler before those
// destructors (it is registered after them): the link is uninstalled and the Worker stopped under
// g_mu, as shutdown() does, so a SIGTERM during exit gets its previous disposition.
void stop_elastic_at_exit() { stop_elastic(); }

}  // namespace

WorkerOptions worker_options_from(const Config& c) {
  WorkerOptions o;
  auto& m = o.membership;
  m.job_id = c.job_id;
  m.worker_id = c.worker_id;
  m.hostname = c.hostname;
  m.bind_address = c.bind_address;
  m.min_np = c.min_np;
  m.max_np = c.max_np;
  m.heartbeat = std::chrono::milliseconds(c.heartbeat_ms);
  m.lease = std::chrono::milliseconds(c.lease_ms);
  m.rendezvous_timeout = std::chrono::milliseconds(c.rendezvous_timeout_ms);
  m.rendezvous_grace = std::chrono::milliseconds(c.rendezvous_grace_ms);
  m.start_window = std::chrono::milliseconds(c.start_window_ms);
  m.progress_timeout = std::chrono::milliseconds(c.progress_timeout_ms);
  m.progress_floor = std::chrono::milliseconds(c.timeout_ms);
  m.wall_clock_offset = std::chrono::milliseconds(c.test_clock_offset_ms);
  if (!c.test_kill_at.empty()) {
    std::string at = c.test_kill_at;  // test hook: die like kill -9 at this protocol point
    m.fault = [at](const std::string& point) {
      if (point == at) ::kill(::getpid(), SIGKILL);
    };
  }
  o.retry_user_errors = c.retry_user_errors;
  o.allow_restart_from_scratch = c.allow_restart_from_scratch;
  o.reset_limit = c.reset_limit;
  o.commit_every = c.commit_every;
  o.checkpoint_dir = c.checkpoint_dir;
  o.stragglers.factor = c.straggler_factor;
  o.stragglers.steps = c.straggler_steps;
  o.stragglers.evict = c.evict_stragglers;
  o.stop_free.enabled = c.join == "stopfree";
  o.stop_free.fetch_share = c.join_fetch_share;
  o.stop_free.max_chunk_bytes = c.join_max_chunk_bytes;
  o.stop_free.secret = c.secret;
  o.stop_free.io_timeout = std::chrono::milliseconds(c.timeout_ms);
  return o;
}

std::shared_ptr<Store> connect_job_store(const Config& config) {
  if (!config.launched) return nullptr;
  StoreOptions so;
  so.secret = config.secret;
  so.connect_timeout = std::chrono::milliseconds(config.connect_timeout_ms);
  so.reconnect_timeout = std::chrono::milliseconds(config.store_timeout_ms);  // EDL_STORE_TIMEOUT_MS
  return connect_store(config.store_url, so);
}

void start_elastic(const Config& config, std::shared_ptr<Store> store) {
  g_commit_every = config.commit_every;
  // Members of a fresh generation connect within seconds; one that died right after the decision
  // must not hold the others for the full EDL_CONNECT_TIMEOUT_MS (its watchers' abort cancels the
  // build sooner; this is the backstop). The store serves the decision to every member, so the last
  // one starts building later as the job grows: 20 ms more per member (at 512 workers on a saturated
  // etcd, members started up to ~8 s apart and a bound of lease + grace + 2 s aborted every
  // generation). Never above EDL_CONNECT_TIMEOUT_MS.
  const auto backstop = config.lease_ms + config.rendezvous_grace_ms + 2000;
  auto factory = [backstop](const GenerationView& v, const std::string& prefix) -> std::shared_ptr<Group> {
    auto& rt = edl::detail::Runtime::instance();
    const auto connect = std::chrono::milliseconds(backstop + 20 * static_cast<int64_t>(v.size));
    // Every member published its mesh listener with its arrival: the mesh is dialled from the
    // decision at once (the same member list everywhere, so every rank takes the same path).
    std::vector<std::string> addresses;
    for (const auto& m : v.members) addresses.push_back(m.mesh);
    if (static_cast<int>(addresses.size()) != v.size ||
        std::any_of(addresses.begin(), addresses.end(), [](const std::string& a) { return a.empty(); }))
      addresses.clear();
    auto gen =
        rt.make_generation(v.id, prefix, v.rank, v.size, v.local_rank, v.local_size, connect, v.cancel, addresses);
    rt.set_generation(gen);
    return std::make_shared<RuntimeGroup>(gen);
  };
  if (!config.metrics_addr.empty()) store = metrics::make_timed_store(std::move(store));  // store latency
  WorkerOptions options = worker_options_from(config);
  options.membership.mesh_address = [] { return edl::detail::Runtime::instance().mesh_address(); };
  // The beats on a connection of their own where the client serialises its requests (redis://, whose
  // commands share a mutex): no request of the training or the watch thread can then queue before a
  // beat. The tcp:// client multiplexes every request on its connection (an io thread routes the
  // replies, so a blocked wait never holds a beat back, and the embedded store expires a lease only
  // after serving every request that reached it), and the etcd:// client sends each concurrent
  // request on a pooled HTTP connection of its own (a watch on another one): their beats share the
  // worker's Store — one descriptor per worker fewer (and on etcd one status request, a watch cache
  // and a pool of connections fewer) (docs/elastic.md, "Beats").
  if (config.store_url.rfind("redis://", 0) == 0) options.membership.beat_store = connect_job_store(config);
  auto w = std::make_shared<Worker>(std::move(store), std::move(options), factory);
  w->set_local_batch_size(g_local_batch.load());
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_worker = w;
  }
  // SIGTERM = graceful leave at the next batch boundary; exit at once when edl-run dies.
  install_launcher_link(config, [] { return request_leave_if_running(); });
  static std::once_flag at_exit;
  std::call_once(at_exit, [] { std::atexit(stop_elastic_at_exit); });
  try {
    // A stop-free newcomer to a running job joins in run(), once its State is registered and
    // committed: nothing it does before (building its model, its first commit) holds up the job.
    if (config.join != "stopfree" || !job_running(*w->store(), config.job_id)) w->join();
  } catch (const JobFinished&) {
    stop_elastic();
    throw JobError("edl: job '" + config.job_id + "' has already finished; nothing to join");
  } catch (...) {
    stop_elastic();
    throw;
  }
}

void stop_elastic() {
  std::shared_ptr<Worker> w;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    w = std::move(g_worker);
  }
  uninstall_launcher_link();
  w.reset();  // stops the lease thread and removes the lease
}

const char* outcome_name(RunOutcome outcome) {
  switch (outcome) {
    case RunOutcome::kFinished: return "finished";
    case RunOutcome::kLeft: return "left";
  }
  return "unknown";
}

RunOutcome run(State& state, const std::function<void()>& fn) {
  if (auto w = worker()) return run_elastic(*w, state, fn);
  // Static world: one generation; sync from the best member once, then fn; failures propagate.
  auto gen = edl::detail::Runtime::instance().generation();
  RuntimeGroup g(gen);
  if (state.committed_step() < 0 && !state.load_checkpoint()) state.commit();
  sync_state(state, g);
  set_current_group(&g);
  g_static_state = &state;
  g_static_since_commit = 0;
  struct Reset {
    ~Reset() {
      g_static_state = nullptr;
      set_current_group(nullptr);
    }
  } reset;
  metrics::WorkerMetrics::instance().set_phase(metrics::Phase::kTraining);
  fn();
  metrics::WorkerMetrics::instance().set_phase(metrics::Phase::kDone);
  return RunOutcome::kFinished;
}

void request_leave() {
  if (auto w = worker()) w->request_leave();
}

bool latest_step_times(uint64_t generation, uint64_t* seq, std::vector<double>* compute_s,
                       std::vector<uint64_t>* records) {
  auto w = worker();
  std::vector<int64_t> us, n;
  if (!w || !w->step_times(generation, seq, &us, &n)) return false;
  compute_s->assign(us.size(), 0.0);
  records->assign(n.size(), 0);
  for (size_t r = 0; r < us.size(); ++r) (*compute_s)[r] = static_cast<double>(us[r]) / 1e6;
  for (size_t r = 0; r < n.size(); ++r) (*records)[r] = static_cast<uint64_t>(std::max<int64_t>(0, n[r]));
  return true;
}

void note_step_records(uint64_t records) {
  if (auto w = worker()) w->note_step_records(records);
}

void set_local_batch_size(int64_t samples) { edl::set_samples_per_batch(samples); }

}  // namespace edl::elastic

namespace edl {

void notify_batch_end() {
  if (auto w = elastic::worker()) {
    w->notify_batch_end();
    return;
  }
  EDL_CHECK(elastic::g_static_state != nullptr, InvalidArgument,
            "edl::notify_batch_end() must be called inside edl::elastic::run");
  elastic::g_static_state->step += 1;
  metrics::WorkerMetrics::instance().batch_end(elastic::g_static_state->step);
  if (++elastic::g_static_since_commit >= elastic::g_commit_every) {
    elastic::g_static_state->commit();
    metrics::WorkerMetrics::instance().committed();
    elastic::g_static_since_commit = 0;
  }
}

void set_samples_per_batch(int64_t samples) {
  EDL_CHECK(samples >= 0, InvalidArgument,
            "edl::set_samples_per_batch: samples must not be negative, got " + std::to_string(samples));
  metrics::WorkerMetrics::instance().set_samples_per_batch(samples);
  elastic::g_local_batch.store(samples);  // the throughput record of a Worker created later, too
  if (auto w = elastic::worker()) w->set_local_batch_size(samples);
}

}  // namespace edl
