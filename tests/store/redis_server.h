// Test helper: a private redis-server on a free port with a temp dir, killed when the object dies
// (and by PR_SET_PDEATHSIG if the test process itself dies).
#pragma once

#include <memory>
#include <string>

namespace edl::test {

class RedisServer {
 public:
  // Starts redis-server with `requirepass` = password (none when empty). available() is false when
  // redis-server is not installed; start failures throw std::runtime_error.
  explicit RedisServer(const std::string& password = "");
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  bool available() const { return pid_ > 0; }
  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  // Removes every key (between test cases).
  void flush();
  // Kills the server now (clients must see StoreError).
  void kill();

  // A process-wide instance shared by test cases (started on first use), password "redis-secret".
  static RedisServer& shared();

 private:
  int pid_ = -1;
  int port_ = 0;
  std::string password_;
  std::string dir_;
};

}  // namespace edl::test
