#include "elastic/launcher/store_watcher.h"

#include <sstream>

#include "edl/error.h"
#include "elastic/keys.h"
#include "elastic/member_list.h"
#include "elastic/launcher/launcher.h"

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

}  // namespace

StoreWatcher::StoreWatcher(std::shared_ptr<Store> store, StoreWatcherOptions options)
    : opt_(std::move(options)), store_(std::move(store)) {
  thread_ = std::thread([this] { loop(); });
}

StoreWatcher::~StoreWatcher() {
  stop_ = true;
  thread_.join();
}

std::vector<GenerationEvent> StoreWatcher::take_events() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::move(events_);
}

std::string StoreWatcher::job_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return job_error_;
}

std::string StoreWatcher::job_failed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return job_failed_;
}

std::string StoreWatcher::store_lost() const {
  std::lock_guard<std::mutex> lock(mu_);
  return store_lost_;
}

std::shared_ptr<Store> StoreWatcher::store() const {
  std::lock_guard<std::mutex> lock(mu_);
  return store_;
}

// One round: generations, job error / failure, lease count, finished; then waits for <job>/gen.
void StoreWatcher::poll_once(std::optional<std::string>* known, uint64_t* reported) {
  std::shared_ptr<Store> s = store();
  if (!s) {
    s = opt_.connect();
    std::lock_guard<std::mutex> lock(mu_);
    store_ = s;
  }
  elastic::Keys keys(opt_.job_id);
  auto cur = s->get(keys.gen());
  uint64_t g = parse_gen(cur);
  if (g > *reported) {
    auto members = s->get(keys.members(g));
    if (members) {
      GenerationEvent e{g, member_ids(*members), {}, std::chrono::steady_clock::now()};
      const std::string prefix = keys.dropped(g, "");
      for (const auto& k : s->keys(prefix))
        if (auto why = s->get(k)) e.dropped[k.substr(prefix.size())] = *why;
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(std::move(e));
      *reported = g;
    }
  }
  auto next = s->get(keys.members(g + 1));
  auto failed = s->get(opt_.job_id + "/failed");  // written by a worker with a non-retryable error
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto job_error = next ? elastic::parse_job_error(*next) : std::nullopt) job_error_ = *job_error;
    if (failed) job_failed_ = failed->empty() ? "(no reason given)" : *failed;
  }
  live_ = static_cast<int>(s->keys(keys.lease_prefix()).size());
  finished_ = s->get(keys.finished()).has_value();
  if (unreachable_.exchange(false)) log_event("store " + opt_.store_url + " answers again");
  *known = cur;
  s->wait_change(keys.gen(), *known, std::chrono::milliseconds(500));
}

void StoreWatcher::on_error(const std::string& what, std::chrono::steady_clock::time_point* since) {
  auto now = std::chrono::steady_clock::now();
  if (!unreachable_.exchange(true)) {
    log_event("warning: cannot reach the store " + opt_.store_url + ": " + what + " (reconnecting; the job fails after " +
              std::to_string(opt_.reconnect_timeout.count()) + " ms, EDL_STORE_TIMEOUT_MS)");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    store_.reset();  // reconnect on the next round
    if (now - *since >= opt_.reconnect_timeout && store_lost_.empty())
      store_lost_ = "the store " + opt_.store_url + " has been unreachable for more than " +
                    std::to_string(opt_.reconnect_timeout.count()) + " ms (EDL_STORE_TIMEOUT_MS): " + what;
  }
  for (int i = 0; i < 2 && !stop_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

void StoreWatcher::loop() {
  std::optional<std::string> known;
  uint64_t reported = 0;
  // The store counts as lost EDL_STORE_TIMEOUT_MS after the last round that reached it (not after
  // the first error: a silently cut link first shows as a request that times out).
  std::chrono::steady_clock::time_point since = std::chrono::steady_clock::now();
  while (!stop_) {
    try {
      poll_once(&known, &reported);
      since = std::chrono::steady_clock::now();
    } catch (const Error& e) {
      on_error(e.what(), &since);
    } catch (const std::exception& e) {
      on_error(e.what(), &since);
    }
  }
}

}  // namespace edl::launcher
