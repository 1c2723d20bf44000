#include "testing/redis_server.h"

#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <thread>
#include <vector>

#include "testing/ports.h"
#include "testing/process.h"

namespace edl::testing {
namespace {

bool installed() { return !find_program("redis-server").empty(); }

redisContext* connect_auth(int port, const std::string& password) {
  timeval tv{1, 0};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port, tv);
  if (!c || c->err) {
    if (c) redisFree(c);
    return nullptr;
  }
  if (!password.empty()) {
    auto* r = static_cast<redisReply*>(redisCommand(c, "AUTH %s", password.c_str()));
    if (r) freeReplyObject(r);
  }
  return c;
}

}  // namespace

RedisServer::RedisServer(const std::string& password, bool appendonly) : password_(password), appendonly_(appendonly) {
  if (!installed()) return;
  char tmpl[] = "/tmp/edl-redis-XXXXXX";
  if (!mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
  dir_ = tmpl;
  port_ = free_port();
  launch();
}

void RedisServer::restart() {
  kill();
  launch();
}

void RedisServer::launch() {
  std::vector<std::string> args = {"redis-server", "--port", std::to_string(port_), "--bind", "127.0.0.1",
                                   "--dir", dir_, "--save", "", "--daemonize", "no",
                                   "--loglevel", "warning", "--hz", "50"};
  if (appendonly_) {
    for (const char* a : {"--appendonly", "yes", "--appendfsync", "always"}) args.push_back(a);
  } else {
    for (const char* a : {"--appendonly", "no"}) args.push_back(a);
  }
  if (!password_.empty()) {
    args.push_back("--requirepass");
    args.push_back(password_);
  }
  SpawnOptions o;
  o.stdout_path = "/dev/null";
  o.own_group = false;
  o.die_with_parent = true;
  pid_ = spawn(args, o);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (redisContext* c = connect_auth(port_, password_)) {
      auto* r = static_cast<redisReply*>(redisCommand(c, "PING"));
      bool ok = r && r->type == REDIS_REPLY_STATUS;
      if (r) freeReplyObject(r);
      redisFree(c);
      if (ok) return;
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error("redis-server exited during start-up");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill();
  throw std::runtime_error("redis-server did not answer PING within 10 s");
}

RedisServer::~RedisServer() {
  kill();
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

void RedisServer::kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -2;  // was available, now gone
}

void RedisServer::flush() {
  if (redisContext* c = connect_auth(port_, password_)) {
    auto* r = static_cast<redisReply*>(redisCommand(c, "FLUSHALL"));
    if (r) freeReplyObject(r);
    redisFree(c);
  }
}

double RedisServer::commands_processed() const {
  double n = 0;
  if (redisContext* c = connect_auth(port_, password_)) {
    auto* r = static_cast<redisReply*>(redisCommand(c, "INFO stats"));
    if (r && r->type == REDIS_REPLY_STRING) {
      const std::string info(r->str, r->len);
      const auto p = info.find("total_commands_processed:");
      if (p != std::string::npos) n = std::strtod(info.c_str() + p + 25, nullptr);
    }
    if (r) freeReplyObject(r);
    redisFree(c);
  }
  return n;
}

RedisServer& RedisServer::shared() {
  static RedisServer server("redis-secret");
  return server;
}

}  // namespace edl::testing
