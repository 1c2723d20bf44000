// MeshAddresses (mesh_addresses.h): the peers' published addresses, read on a thread of its own.
#include "collective/mesh_addresses.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "edl/error.h"

namespace edl::collective {

MeshAddresses::MeshAddresses(Store& store, std::vector<int> peers, std::vector<std::string> keys,
                             Clock::time_point deadline)
    : store_(store), peers_(std::move(peers)), keys_(std::move(keys)), deadline_(deadline) {
  event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (event_fd_ < 0) throw CommError(std::string("eventfd(): ") + std::strerror(errno));
  thread_ = std::thread([this] { run(); });
}

MeshAddresses::~MeshAddresses() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  close(event_fd_);
}

std::vector<std::pair<int, std::string>> MeshAddresses::take() {
  uint64_t v;
  ssize_t ignored = read(event_fd_, &v, sizeof(v));
  (void)ignored;
  std::lock_guard<std::mutex> lock(mu_);
  if (error_) std::rethrow_exception(error_);
  return std::exchange(found_, {});
}

void MeshAddresses::hand_over(std::vector<std::pair<int, std::string>> found) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& f : found) found_.push_back(std::move(f));
  }
  uint64_t one = 1;
  ssize_t ignored = write(event_fd_, &one, sizeof(one));
  (void)ignored;
}

void MeshAddresses::run() {
  try {
    while (!peers_.empty() && !stop_.load()) {
      const auto addrs = store_.get_many(keys_);
      reads_.fetch_add(1);
      std::vector<std::pair<int, std::string>> found;
      std::vector<int> peers;
      std::vector<std::string> keys;
      for (size_t i = 0; i < peers_.size(); ++i) {
        if (addrs[i]) {
          found.emplace_back(peers_[i], *addrs[i]);
        } else {
          peers.push_back(peers_[i]);
          keys.push_back(keys_[i]);
        }
      }
      peers_ = std::move(peers);
      keys_ = std::move(keys);
      if (!found.empty()) {
        hand_over(std::move(found));
        continue;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
      if (left.count() <= 0) return;  // the builder's deadline names the missing peers
      store_.wait({keys_.front()}, std::min(kWaitSlice, left));
    }
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
    }
    hand_over({});
  }
}

}  // namespace edl::collective
