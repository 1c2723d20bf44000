#include "launcher/store_watcher.h"

#include <algorithm>
#include <condition_variable>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "edl/error.h"
#include "elastic/keys.h"
#include "elastic/member_list.h"
#include "launcher/launcher.h"

namespace edl::launcher {
namespace {

uint64_t parse_gen(const std::optional<std::string>& v) {
  if (!v) return 0;
  try {
    return std::stoull(*v);
  } catch (const std::exception&) {
    return 0;
  }
}

std::vector<std::string> member_ids(const std::string& text) {
  std::vector<std::string> ids;
  for (auto& m : elastic::parse_members(text)) ids.push_back(std::move(m.id));
  return ids;
}

// The workers left out (<job>/g<G>/dropped/<w>) of generation g and of the generations since
// `reported` that this round skipped (two were decided between two rounds), except those that are
// members of g again: worker -> the decider's reason. Rank 0 keeps only the last three generations'
// keys, so no more are read.
std::map<std::string, std::string> dropped_since(Store& s, const elastic::Keys& keys, uint64_t reported, uint64_t g,
                                                 const std::vector<std::string>& members) {
  std::map<std::string, std::string> dropped;
  const std::set<std::string> now(members.begin(), members.end());
  for (uint64_t gen = std::max(reported + 1, g >= 2 ? g - 2 : 1); gen <= g; ++gen) {
    const std::string prefix = keys.dropped(gen, "");
    for (const auto& k : s.keys(prefix)) {
      const std::string worker = k.substr(prefix.size());
      if (now.count(worker)) continue;
      if (auto why = s.get(k)) dropped[worker] = *why;
    }
  }
  return dropped;
}

}  // namespace

// What the watcher's thread reads and writes: owned jointly by the watcher and its thread.
struct StoreWatcher::State {
  explicit State(StoreWatcherOptions o, std::shared_ptr<Store> st) : opt(std::move(o)), store(std::move(st)) {}
  const StoreWatcherOptions opt;
  std::atomic<bool> stop{false};
  std::atomic<bool> done{false};  // the thread has left its loop
  std::atomic<int> live{-1};
  std::atomic<bool> finished{false};
  std::atomic<bool> unreachable{false};
  mutable std::mutex mu;
  std::condition_variable done_cv;
  std::shared_ptr<Store> store;
  std::vector<GenerationEvent> events;
  std::string job_error, job_failed, last_error;
  std::string throughput;                           // <job>/throughput, "" = none yet
  std::map<std::string, std::string> stragglers;    // <job>/straggler/<worker> -> report
  // The end of the last round that reached the store: the store counts as lost reconnect_timeout later
  // (not after the first error: a silently cut link first shows as a request that times out).
  std::chrono::steady_clock::time_point last_ok = std::chrono::steady_clock::now();
};

StoreWatcher::StoreWatcher(std::shared_ptr<Store> store, StoreWatcherOptions options)
    : s_(std::make_shared<State>(std::move(options), std::move(store))) {
  thread_ = std::thread([s = s_] { loop(s); });
}

StoreWatcher::~StoreWatcher() {
  s_->stop = true;
  // A round that reaches the store ends within its 500 ms wait; one hanging on an unreachable store
  // may take a request timeout: that is not waited for (edl-run is exiting), the thread ends alone.
  std::unique_lock<std::mutex> lock(s_->mu);
  auto bound = s_->unreachable ? std::chrono::milliseconds(0) : std::chrono::milliseconds(1000);
  bool done = s_->done_cv.wait_for(lock, bound, [&] { return s_->done.load(); });
  lock.unlock();
  if (done) thread_.join();
  else thread_.detach();
}

std::vector<GenerationEvent> StoreWatcher::take_events() {
  std::lock_guard<std::mutex> lock(s_->mu);
  return std::move(s_->events);
}

int StoreWatcher::live_workers() const { return s_->live.load(); }
bool StoreWatcher::finished() const { return s_->finished.load(); }
bool StoreWatcher::unreachable() const { return s_->unreachable.load(); }

std::string StoreWatcher::job_error() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->job_error;
}

std::string StoreWatcher::job_failed() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->job_failed;
}

std::string StoreWatcher::store_lost() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  if (!s_->unreachable || std::chrono::steady_clock::now() - s_->last_ok < s_->opt.reconnect_timeout) return "";
  return "the store " + s_->opt.store_url + " has been unreachable for more than " + std::to_string(s_->opt.reconnect_timeout.count()) +
         " ms (EDL_STORE_TIMEOUT_MS): " + s_->last_error;
}

std::string StoreWatcher::throughput() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->throughput;
}

std::map<std::string, std::string> StoreWatcher::stragglers() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->stragglers;
}

std::shared_ptr<Store> StoreWatcher::store() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->store;
}

// One round: generations, job error / failure, lease count, finished; then waits for <job>/gen.
void StoreWatcher::poll_once(State& st, std::optional<std::string>* known, uint64_t* reported) {
  std::shared_ptr<Store> s;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    s = st.store;
  }
  if (!s) {
    s = st.opt.connect();
    std::lock_guard<std::mutex> lock(st.mu);
    st.store = s;
  }
  elastic::Keys keys(st.opt.job_id);
  auto cur = s->get(keys.gen());
  uint64_t g = parse_gen(cur);
  if (g > *reported) {
    auto members = s->get(keys.members(g));
    if (members) {
      GenerationEvent e{g, member_ids(*members), {}, std::chrono::steady_clock::now()};
      e.dropped = dropped_since(*s, keys, *reported, g, e.members);
      std::lock_guard<std::mutex> lock(st.mu);
      st.events.push_back(std::move(e));
      *reported = g;
    }
  }
  auto next = s->get(keys.members(g + 1));
  auto failed = s->get(st.opt.job_id + "/failed");  // written by a worker with a non-retryable error
  auto throughput = s->get(keys.throughput());
  std::map<std::string, std::string> stragglers;
  for (const auto& k : s->keys(keys.straggler_prefix()))
    if (auto v = s->get(k)) stragglers[k.substr(keys.straggler_prefix().size())] = *v;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    if (throughput) st.throughput = *throughput;
    st.stragglers = std::move(stragglers);
    if (auto job_error = next ? elastic::parse_job_error(*next) : std::nullopt) st.job_error = *job_error;
    if (failed) st.job_failed = failed->empty() ? "(no reason given)" : *failed;
  }
  st.live = static_cast<int>(s->keys(keys.lease_prefix()).size());
  st.finished = s->get(keys.finished()).has_value();
  *known = cur;
  s->wait_change(keys.gen(), *known, std::chrono::milliseconds(500));
}

void StoreWatcher::on_error(State& st, const std::string& what) {
  if (!st.unreachable.exchange(true)) {
    log_event("warning: cannot reach the store " + st.opt.store_url + ": " + what + " (reconnecting; the job fails after " +
              std::to_string(st.opt.reconnect_timeout.count()) + " ms, EDL_STORE_TIMEOUT_MS)");
  }
  {
    std::lock_guard<std::mutex> lock(st.mu);
    st.store.reset();  // reconnect on the next round
    st.last_error = what;
  }
  for (int i = 0; i < 2 && !st.stop; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

void StoreWatcher::loop(const std::shared_ptr<State>& s) {
  std::optional<std::string> known;
  uint64_t reported = 0;
  while (!s->stop) {
    try {
      poll_once(*s, &known, &reported);
      {
        std::lock_guard<std::mutex> lock(s->mu);
        s->last_ok = std::chrono::steady_clock::now();
      }
      if (s->unreachable.exchange(false)) log_event("store " + s->opt.store_url + " answers again");
    } catch (const Error& e) {
      on_error(*s, e.what());
    } catch (const std::exception& e) {
      on_error(*s, e.what());
    }
  }
  std::lock_guard<std::mutex> lock(s->mu);
  s->done = true;
  s->done_cv.notify_all();
}

}  // namespace edl::launcher
