// MetricsService: edl-run's metrics plumbing around one JobMetrics (docs/observability.md).
//  - the collector: a Unix datagram socket in the abstract namespace (worker_addr(), handed to the
//    workers as EDL_METRICS_ADDR) and a thread that decodes WorkerReports into the JobMetrics;
//  - --metrics-port: a cpp-httplib server thread serving GET /metrics (Prometheus text format) and
//    GET /report (the goodput report so far, JSON);
//  - --metrics-file: a thread appending one CSV row every --metrics-interval seconds;
//  - finish(): the last CSV row, the report line in edl-run's log and --report PATH.
// The launcher's main thread feeds its own events through job().
// Thread-safety: job() from any thread; construction, finish() and destruction from one thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "launcher/job_metrics.h"
#include "launcher/options.h"

namespace httplib {
class Server;
}

namespace edl::launcher {

struct MetricsOptions {
  int port = -1;                   // --metrics-port: -1 = no HTTP endpoint; 0 = any free port (logged)
  std::string bind_address = "127.0.0.1";  // --metrics-bind: address of the HTTP endpoint
  std::string file;                // --metrics-file: CSV path ("" = none)
  double interval_s = 1.0;         // --metrics-interval: seconds between CSV rows
  std::string report_path;         // --report: JSON path of the goodput report ("" = only the log line)
};

// The metrics part of edl-run's command line.
MetricsOptions metrics_options(const LaunchOptions& o);

class MetricsService {
 public:
  // Throws InvalidArgument naming the flag when the port cannot be bound or the file not created.
  MetricsService(MetricsOptions options, MetricsClock::time_point start, std::function<void(const std::string&)> log);
  ~MetricsService();
  MetricsService(const MetricsService&) = delete;
  MetricsService& operator=(const MetricsService&) = delete;

  // EDL_METRICS_ADDR for the workers ("" when the collector socket could not be created).
  const std::string& worker_addr() const { return addr_; }
  int port() const { return port_; }
  JobMetrics& job() { return job_; }
  // The job ended with exit_code: last CSV row, "event=report ..." in the log, --report file.
  void finish(int exit_code);

 private:
  void open_collector();
  void receive_loop();
  bool receive_one(int flags);
  void start_http();
  void csv_loop();
  void write_csv_row();

  MetricsOptions opt_;
  std::function<void(const std::string&)> log_;
  JobMetrics job_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> stop_receiving_{false};
  int fd_ = -1;
  std::string addr_;
  std::thread receiver_;
  std::unique_ptr<httplib::Server> http_;
  std::thread http_thread_;
  int port_ = -1;
  std::mutex csv_mu_;
  std::condition_variable csv_cv_;
  std::FILE* csv_ = nullptr;
  std::thread csv_thread_;
  bool finished_ = false;
};

}  // namespace edl::launcher
