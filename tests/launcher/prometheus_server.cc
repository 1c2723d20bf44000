#include "launcher/prometheus_server.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

#include "launcher/run_util.h"

namespace edl::test {

PrometheusServer::PrometheusServer(const std::string& target) {
  const std::string binary = edl::testing::find_program("prometheus");
  if (binary.empty()) return;
  char tmpl[] = "/tmp/edl-prometheus-XXXXXX";
  if (!mkdtemp(tmpl)) throw std::runtime_error("cannot create a temp dir for prometheus");
  dir_ = tmpl;
  {
    std::ofstream cfg(dir_ + "/prometheus.yml");
    cfg << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        << "scrape_configs:\n  - job_name: edl\n    scrape_interval: 1s\n    scrape_timeout: 900ms\n"
        << "    static_configs:\n      - targets: ['" << target << "']\n";
  }
  port_ = free_port();
  edl::testing::SpawnOptions so;
  so.log = dir_ + "/prometheus.log";
  so.die_with_parent = true;
  proc_ = edl::testing::Process({binary, "--config.file=" + dir_ + "/prometheus.yml", "--storage.tsdb.path=" + dir_ + "/data",
                                 "--web.listen-address=127.0.0.1:" + std::to_string(port_),
                                 "--storage.tsdb.retention.time=1h", "--log.level=warn"},
                                so);
  httplib::Client c("127.0.0.1", port_);
  c.set_connection_timeout(1, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    if (proc_.poll() >= 0) throw std::runtime_error("prometheus exited at start:\n" + log());
    auto r = c.Get("/-/ready");
    if (r && r->status == 200) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  throw std::runtime_error("prometheus did not become ready within 60 s:\n" + log());
}

PrometheusServer::~PrometheusServer() {
  if (proc_.started()) proc_.stop(std::chrono::seconds(5));
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

std::optional<double> PrometheusServer::query(const std::string& promql) {
  httplib::Client c("127.0.0.1", port_);
  c.set_read_timeout(5, 0);
  auto r = c.Get("/api/v1/query", httplib::Params{{"query", promql}}, httplib::Headers{});
  if (!r || r->status != 200) return std::nullopt;
  try {
    auto j = nlohmann::json::parse(r->body);
    if (j.value("status", "") != "success") return std::nullopt;
    const auto& result = j["data"]["result"];
    if (!result.is_array() || result.empty()) return std::nullopt;
    return std::stod(result[0]["value"][1].get<std::string>());
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string PrometheusServer::log() const { return dir_.empty() ? "" : read_file(dir_ + "/prometheus.log"); }

}  // namespace edl::test
