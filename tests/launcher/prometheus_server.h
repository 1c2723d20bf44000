// Test helper: a private Prometheus server (Debian's `prometheus`) on a free loopback port, with its
// own config (one scrape job, interval 1 s) and data dir in a temp dir; stopped by pid (SIGTERM,
// then SIGKILL) and the dir removed when the object dies.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "testing/process.h"

namespace edl::test {

class PrometheusServer {
 public:
  // Scrapes http://<target>/metrics (target "127.0.0.1:PORT") every second. available() is false when
  // prometheus is not installed; a server that does not become ready throws std::runtime_error.
  explicit PrometheusServer(const std::string& target);
  ~PrometheusServer();
  PrometheusServer(const PrometheusServer&) = delete;
  PrometheusServer& operator=(const PrometheusServer&) = delete;

  bool available() const { return proc_.started(); }
  int port() const { return port_; }
  // The value of the first sample of an instant query (GET /api/v1/query), nullopt when the result
  // is empty or the query fails.
  std::optional<double> query(const std::string& promql);
  // Polls query(promql) until pred(value) holds; the last value seen (nullopt = none) and whether it held.
  template <typename Pred>
  bool wait_for(const std::string& promql, Pred pred, std::chrono::milliseconds timeout, std::optional<double>* last);
  std::string log() const;

 private:
  std::string dir_;
  int port_ = 0;
  edl::testing::Process proc_;
};

template <typename Pred>
bool PrometheusServer::wait_for(const std::string& promql, Pred pred, std::chrono::milliseconds timeout,
                                std::optional<double>* last) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    *last = query(promql);
    if (*last && pred(**last)) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    struct timespec ts{0, 250 * 1000 * 1000};
    nanosleep(&ts, nullptr);
  }
}

}  // namespace edl::test
