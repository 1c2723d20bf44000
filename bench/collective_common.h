// Shared pieces of the collective benchmarks: --local-ranks N (start an embedded store server and
// N copies of this program with the environment edl-run would give them) and the adapter that lets
// Gloo's rendezvous run over an edl::Store (for the Gloo baseline rows).
// Thread-safety: main-thread helpers.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "edl/store.h"
#include "edl/store_server.h"
#include "testing/process.h"

namespace edl::bench {

// Runs N copies of argv (minus "--local-ranks N") as ranks 0..N-1 of a job served by an embedded
// store; returns the first non-zero exit status (0 when all succeeded).
inline int run_local_ranks(int n, int argc, char** argv) {
  StoreServer server;
  std::vector<std::string> args;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--local-ranks") {
      ++i;
      continue;
    }
    if (a.rfind("--local-ranks=", 0) == 0) continue;
    args.push_back(a);
  }
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    edl::testing::SpawnOptions so;
    so.own_group = false;
    so.env = {"EDL_STORE=" + server.url(), "EDL_RANK=" + std::to_string(r), "EDL_SIZE=" + std::to_string(n),
              "EDL_LOCAL_RANK=" + std::to_string(r), "EDL_LOCAL_SIZE=" + std::to_string(n)};
    std::vector<std::string> self = args;
    self[0] = "/proc/self/exe";
    pid_t pid = edl::testing::spawn(self, so);
    pids.push_back(pid);
  }
  int result = 0;
  for (size_t done = 0; done < pids.size(); ++done) {
    int status = 0;
    pid_t p = wait(&status);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code != 0 && result == 0) {
      result = code;
      for (pid_t q : pids)
        if (q != p) kill(q, SIGTERM);
    }
  }
  return result;
}

// gloo::rendezvous::Store over an edl::Store.
class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(std::shared_ptr<edl::Store> store, std::string prefix)
      : store_(std::move(store)), prefix_(std::move(prefix)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(prefix_ + key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    std::string v = store_->get_wait(prefix_ + key, std::chrono::seconds(60));
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, std::chrono::seconds(60)); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> full;
    for (auto& k : keys) full.push_back(prefix_ + k);
    if (!store_->wait(full, timeout)) throw std::runtime_error("gloo rendezvous: timeout waiting for keys");
  }

 private:
  std::shared_ptr<edl::Store> store_;
  std::string prefix_;
};

}  // namespace edl::bench
