#include "launcher/metrics_service.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <httplib.h>
#include <random>

#include "edl/error.h"
#include "launcher/goodput_report.h"
#include "launcher/metrics_exposition.h"

namespace edl::launcher {

MetricsOptions metrics_options(const LaunchOptions& o) {
  MetricsOptions m;
  m.port = o.metrics_port;
  m.bind_address = o.metrics_bind_address;
  m.file = o.metrics_file;
  m.interval_s = o.metrics_interval_s;
  m.report_path = o.report_path;
  return m;
}

MetricsService::MetricsService(MetricsOptions options, MetricsClock::time_point start,
                               std::function<void(const std::string&)> log)
    : opt_(std::move(options)), log_(std::move(log)), job_(start) {
  if (!opt_.file.empty()) {
    csv_ = std::fopen(opt_.file.c_str(), "w");
    if (!csv_)
      throw InvalidArgument("--metrics-file '" + opt_.file + "' cannot be written: " + std::strerror(errno));
    std::fputs(csv_header().c_str(), csv_);
    std::fflush(csv_);
  }
  if (opt_.port >= 0) start_http();
  open_collector();
  if (fd_ >= 0) receiver_ = std::thread(&MetricsService::receive_loop, this);
  if (csv_) csv_thread_ = std::thread(&MetricsService::csv_loop, this);
}

MetricsService::~MetricsService() {
  stop_ = true;
  stop_receiving_ = true;
  csv_cv_.notify_all();
  if (csv_thread_.joinable()) csv_thread_.join();
  if (receiver_.joinable()) receiver_.join();
  if (http_) http_->stop();
  if (http_thread_.joinable()) http_thread_.join();
  if (fd_ >= 0) ::close(fd_);
  if (csv_) std::fclose(csv_);
}

// The collector socket: abstract Unix datagram "@edl-metrics-<pid>-<random>" (no file to remove;
// the name goes away with the socket). Without it the job runs unobserved (a warning).
void MetricsService::open_collector() {
  std::random_device rd;
  char name[64];
  std::snprintf(name, sizeof(name), "@edl-metrics-%d-%08x", static_cast<int>(::getpid()), rd());
  int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const size_t n = std::strlen(name);
  std::memcpy(a.sun_path, name, n);
  a.sun_path[0] = '\0';
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + n)) != 0) {
    log_(std::string("event=warning reason=\"no metrics collector socket: ") + std::strerror(errno) +
         "; the job runs without worker metrics\"");
    if (fd >= 0) ::close(fd);
    return;
  }
  int buf = 4 << 20;  // room for bursts of reports (phase changes of many workers at once)
  (void)::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
  timeval tv{0, 200 * 1000};  // the loop checks stop_ this often
  (void)::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  fd_ = fd;
  addr_ = name;
}

void MetricsService::receive_loop() {
  while (!stop_receiving_ && receive_one(0)) {
  }
}

// Takes one datagram (waiting up to the socket's 200 ms timeout unless flags has MSG_DONTWAIT);
// false once nothing came and the caller should look at its stop condition.
bool MetricsService::receive_one(int flags) {
  char buf[sizeof(metrics::WorkerReport) + 1024];
  ssize_t n = ::recv(fd_, buf, sizeof(buf), flags);
  if (n <= 0) return errno == EINTR || (!(flags & MSG_DONTWAIT) && !stop_receiving_);
  metrics::WorkerReport r;
  if (metrics::decode(buf, static_cast<size_t>(n), &r)) job_.on_report(r, MetricsClock::now());
  return true;
}

void MetricsService::start_http() {
  http_ = std::make_unique<httplib::Server>();
  http_->new_task_queue = [] { return new httplib::ThreadPool(2); };  // scrapes are rare: 2 threads, not 8+
  // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, which would let two edl-runs share a
  // port and split the scrapes between them instead of failing the second one.
  http_->set_socket_options([](socket_t sock) {
    int yes = 1;
    (void)::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(prometheus_text(job_.snapshot(MetricsClock::now())), "text/plain; version=0.0.4; charset=utf-8");
  });
  http_->Get("/report", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(goodput_json(job_.snapshot(MetricsClock::now()), -1), "application/json");
  });
  if (opt_.port == 0) {
    port_ = http_->bind_to_any_port(opt_.bind_address);
  } else {
    port_ = http_->bind_to_port(opt_.bind_address, opt_.port) ? opt_.port : -1;
  }
  if (port_ <= 0)
    throw InvalidArgument("--metrics-port " + std::to_string(opt_.port) + ": cannot listen on " + opt_.bind_address + ":" +
                          std::to_string(opt_.port) + " (in use, or --metrics-bind is not a local address)");
  http_thread_ = std::thread([this] { http_->listen_after_bind(); });
  log_("event=metrics url=http://" + opt_.bind_address + ":" + std::to_string(port_) + "/metrics");
}

void MetricsService::write_csv_row() {
  std::fputs(csv_row(job_.snapshot(MetricsClock::now())).c_str(), csv_);
  std::fflush(csv_);
}

void MetricsService::csv_loop() {
  const auto interval = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(opt_.interval_s));
  auto next = std::chrono::steady_clock::now() + interval;
  std::unique_lock<std::mutex> lock(csv_mu_);
  while (!stop_ && !finished_) {
    if (csv_cv_.wait_until(lock, next, [&] { return stop_.load() || finished_; })) break;
    write_csv_row();
    next += interval;
  }
}

void MetricsService::finish(int exit_code) {
  {
    std::lock_guard<std::mutex> lock(csv_mu_);
    if (finished_) return;
    finished_ = true;
  }
  csv_cv_.notify_all();
  if (csv_thread_.joinable()) csv_thread_.join();
  // The workers' last reports (sent at shutdown) may still sit in the socket: take them all.
  stop_receiving_ = true;
  if (receiver_.joinable()) receiver_.join();
  while (fd_ >= 0 && receive_one(MSG_DONTWAIT)) {
  }
  const JobSnapshot s = job_.snapshot(MetricsClock::now());
  if (csv_) write_csv_row();
  log_("event=report " + goodput_line(s));
  if (!opt_.report_path.empty()) {
    try {
      write_goodput_report(opt_.report_path, s, exit_code);
    } catch (const std::exception& e) {
      log_(std::string("event=warning reason=\"") + e.what() + "\"");
    }
  }
}

}  // namespace edl::launcher
