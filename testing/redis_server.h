// Real-server fixture for tests and benches: a private redis-server on a free port with a temp dir,
// killed when the object dies (and by PR_SET_PDEATHSIG if the test process itself dies).
// Not thread-safe: drive it from one thread.
#pragma once

#include <memory>
#include <string>

namespace edl::testing {

class RedisServer {
 public:
  // Starts redis-server with `requirepass` = password (none when empty); with `appendonly` every
  // write goes to an append-only file fsynced before the reply (--appendfsync always), so a restart
  // after kill -9 keeps all acknowledged data. available() is false when redis-server is not
  // installed; start failures throw std::runtime_error.
  explicit RedisServer(const std::string& password = "", bool appendonly = false);
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  bool available() const { return pid_ > 0; }
  int port() const { return port_; }
  int pid() const { return pid_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  // Removes every key (between test cases).
  void flush();
  // Commands the server processed so far (INFO stats: total_commands_processed; the INFO itself
  // included); 0 when it cannot be asked.
  double commands_processed() const;
  // Kills the server now with SIGKILL (no shutdown save).
  void kill();
  // Starts it again on the same port and directory (with appendonly, the data comes back).
  void restart();

  // A process-wide instance shared by test cases (started on first use), password "redis-secret".
  static RedisServer& shared();

 private:
  int pid_ = -1;
  int port_ = 0;
  void launch();

  std::string password_;
  bool appendonly_ = false;
  std::string dir_;
};

}  // namespace edl::testing
