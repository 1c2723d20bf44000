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

StoreWatcher::StoreWatcher(std::shared_ptr<Store> store, const std::string& job_id)
    : store_(std::move(store)), job_(job_id) {
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

void StoreWatcher::loop() {
  elastic::Keys keys(job_);
  const std::string error_tag = elastic::kJobErrorTag;
  std::optional<std::string> known;
  uint64_t reported = 0;
  bool warned = false;
  while (!stop_) {
    try {
      auto cur = store_->get(keys.gen());
      uint64_t g = parse_gen(cur);
      if (g > reported) {
        auto members = store_->get(keys.members(g));
        if (members) {
          GenerationEvent e{g, member_ids(*members), std::chrono::steady_clock::now()};
          std::lock_guard<std::mutex> lock(mu_);
          events_.push_back(std::move(e));
          reported = g;
        }
      }
      auto next = store_->get(keys.members(g + 1));
      if (next && next->rfind(error_tag, 0) == 0) {
        std::lock_guard<std::mutex> lock(mu_);
        job_error_ = next->substr(error_tag.size());
      }
      live_ = static_cast<int>(store_->keys(keys.lease_prefix()).size());
      finished_ = store_->get(keys.finished()).has_value();
      known = cur;
      store_->wait_change(keys.gen(), known, std::chrono::milliseconds(500));
    } catch (const Error& e) {
      if (!warned) log_event(std::string("warning: cannot watch the store: ") + e.what());
      warned = true;
      for (int i = 0; i < 5 && !stop_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

}  // namespace edl::launcher
