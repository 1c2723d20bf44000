// Job metrics (docs/observability.md): the collector's arithmetic and text formats in-process, then
// edl-run end to end — bad flags, the CSV file and goodput report of a job with a kill -9, and a
// real Prometheus server scraping a running job.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "launcher/goodput_report.h"
#include "launcher/job_metrics.h"
#include "launcher/metrics_exposition.h"
#include "launcher/prometheus_server.h"
#include "launcher/run_util.h"
#include "testing/process.h"
#include "testing/require_dep.h"

using namespace std::chrono_literals;
using edl::launcher::JobMetrics;
using edl::launcher::JobSnapshot;
using edl::launcher::MetricsClock;
using edl::metrics::Phase;
using edl::metrics::WorkerReport;
using edl::test::count_of;
using edl::test::Launch;
using edl::test::lines_of;
using edl::test::run_edl;

namespace {

const std::string kHelper = EDL_LAUNCHER_HELPER;

WorkerReport report(const std::string& id, uint64_t seq, Phase phase, uint64_t gen, int size, uint64_t steps) {
  WorkerReport r;
  std::snprintf(r.worker_id, sizeof(r.worker_id), "%s", id.c_str());
  r.seq = seq;
  r.phase = static_cast<uint8_t>(phase);
  r.generation = gen;
  r.world_size = size;
  r.steps = steps;
  r.step = static_cast<int64_t>(steps);
  r.samples = steps * 4;  // 4 samples per batch
  r.samples_committed = steps * 4;
  r.timed_steps = steps;
  r.step_seconds = 0.1 * static_cast<double>(steps);
  r.compute_seconds = 0.08 * static_cast<double>(steps);
  r.allreduce_bytes = 1000 * steps;
  r.store_ops = steps;
  r.store_op_seconds = 0.001 * static_cast<double>(steps);
  return r;
}

// The value of `name` in a Prometheus text exposition (first sample with exactly that name+labels).
std::optional<double> sample(const std::string& text, const std::string& name) {
  for (const auto& line : lines_of(text))
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  return std::nullopt;
}

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(line);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  if (!line.empty() && line.back() == sep) out.push_back("");
  return out;
}

}  // namespace

TEST_CASE("metrics: JobMetrics turns worker reports into job counters, phases and rates", "[launcher][metrics]") {
  const auto t0 = MetricsClock::now();
  auto at = [&](double s) { return t0 + std::chrono::duration_cast<MetricsClock::duration>(std::chrono::duration<double>(s)); };
  JobMetrics m(t0);
  m.on_worker_started("h:0.0", at(0));
  m.on_worker_started("h:1.0", at(0));
  m.on_generation(1, {"h:0.0", "h:1.0"}, at(1));
  m.on_report(report("h:0.0", 1, Phase::kTraining, 1, 2, 0), at(1));
  m.on_report(report("h:1.0", 1, Phase::kTraining, 1, 2, 0), at(1));
  // 10 s of training at 10 steps/s: each worker reports 100 batches.
  m.on_report(report("h:0.0", 2, Phase::kTraining, 1, 2, 100), at(11));
  m.on_report(report("h:1.0", 2, Phase::kTraining, 1, 2, 100), at(11));
  JobSnapshot s = m.snapshot(at(11));
  CHECK(s.world_size == 2);
  CHECK(s.generation == 1);
  CHECK(s.phase == Phase::kTraining);
  CHECK(s.steps_total == Approx(100));  // every member runs every step: 2 x 100 batches = 100 job steps
  CHECK(s.samples_total == Approx(800));
  CHECK(s.phase_seconds[static_cast<int>(Phase::kStarting)] == Approx(1));
  CHECK(s.phase_seconds[static_cast<int>(Phase::kTraining)] == Approx(10));
  REQUIRE(s.workers.size() == 2);
  CHECK(s.workers[0].step_seconds == Approx(0.1));
  CHECK(s.workers[0].compute_seconds == Approx(0.08));
  CHECK(s.allreduce_bytes == Approx(200000));
  CHECK(s.store_ops == Approx(200));

  // h:1.0 is killed; h:0.0 recovers (2 s) into generation 2 with a replacement h:1.1; the same
  // recovery reported twice (two reports) counts once.
  m.on_worker_exit("h:1.0", at(12));
  m.on_failure("h:1.0", true, at(12));
  m.on_restart(at(12));
  m.on_worker_started("h:1.1", at(12));
  WorkerReport rec = report("h:0.0", 3, Phase::kRecovery, 1, 2, 110);
  rec.steps_replayed = 3;
  m.on_report(rec, at(12));
  m.on_generation(2, {"h:0.0", "h:1.1"}, at(13.5));
  WorkerReport back = report("h:0.0", 4, Phase::kTraining, 2, 2, 110);
  back.steps_replayed = 3;
  back.recoveries = 1;
  back.recent[0] = edl::metrics::RecoveryRecord{2, 2.0, 3};
  m.on_report(back, at(14));
  m.on_report(report("h:1.1", 1, Phase::kTraining, 2, 2, 0), at(14));
  back.seq = 5;
  back.recent[0].seconds = 1.5;  // another report of the same recovery: the longest one counts
  m.on_report(back, at(14));
  s = m.snapshot(at(14));
  CHECK(s.failures == 1);
  CHECK(s.restarts == 1);
  CHECK(s.joins == 1);
  CHECK(s.leaves == 1);
  REQUIRE(s.recovery_seconds.size() == 1);
  CHECK(s.recovery_seconds[0] == Approx(2.0));
  CHECK(s.steps_replayed == Approx(3));
  CHECK(s.phase_seconds[static_cast<int>(Phase::kRecovery)] == Approx(2));  // 12 s .. 14 s
  CHECK(s.mean_world_size == Approx(2));
  CHECK(s.min_world_size == 2);
  CHECK(s.max_world_size == 2);
  CHECK(s.workers.size() == 2);  // the dead worker's gauges are gone ...
  CHECK(s.allreduce_bytes == Approx(100000 + 110000 + 0));  // ... its counters stay in the totals
  // Goodput: committed samples over uptime; the ratio compares with 2 workers training all the time
  // after training started (t = 1 s .. 14 s).
  CHECK(s.goodput_samples_per_second == Approx(s.samples_committed / 14.0));
  REQUIRE(s.goodput_ratio.has_value());
  CHECK(*s.goodput_ratio > 0);
  CHECK(*s.goodput_ratio < 1);  // 2 s of recovery produced nothing
  CHECK(s.effective_training_ratio == Approx(11.0 / 14.0));  // training 1 s .. 12 s

  // Rates: 10 steps/s for 3 s, then nothing: the rate decays to 0 once the window has passed.
  m.on_report(report("h:0.0", 6, Phase::kTraining, 2, 2, 140), at(17));
  m.on_report(report("h:1.1", 2, Phase::kTraining, 2, 2, 30), at(17));
  CHECK(m.snapshot(at(17)).steps_per_second == Approx(10));
  CHECK(m.snapshot(at(17 + JobMetrics::kRateWindowSeconds + 1)).steps_per_second == Approx(0));

  // After the last worker is done and gone, the job is done (not "recovering").
  m.on_report(report("h:0.0", 7, Phase::kDone, 2, 2, 140), at(22));
  m.on_report(report("h:1.1", 3, Phase::kDone, 2, 2, 30), at(22));
  m.on_worker_exit("h:0.0", at(22));
  m.on_worker_exit("h:1.1", at(22));
  s = m.snapshot(at(24));
  CHECK(s.phase == Phase::kDone);
  CHECK(s.phase_seconds[static_cast<int>(Phase::kDone)] == Approx(2));
}

TEST_CASE("metrics: a member's failure is recovery until the job trains in a newer generation", "[launcher][metrics]") {
  const auto t0 = MetricsClock::now();
  auto at = [&](double s) { return t0 + std::chrono::duration_cast<MetricsClock::duration>(std::chrono::duration<double>(s)); };
  JobMetrics m(t0);
  m.on_generation(1, {"h:0.0", "h:1.0"}, at(0));
  m.on_report(report("h:0.0", 1, Phase::kTraining, 1, 2, 10), at(0));
  m.on_report(report("h:1.0", 1, Phase::kTraining, 1, 2, 10), at(0));
  // A newcomer that dies before it is admitted does not stop training.
  m.on_failure("h:2.0", true, at(1));
  CHECK(m.snapshot(at(1)).phase == Phase::kTraining);
  // A member dies: the survivor still says "training" (blocked with the dead peer), the job recovers.
  m.on_worker_exit("h:1.0", at(2));
  m.on_failure("h:1.0", true, at(2));
  m.on_report(report("h:0.0", 2, Phase::kTraining, 1, 2, 11), at(3));
  CHECK(m.snapshot(at(3)).phase == Phase::kRecovery);
  m.on_generation(2, {"h:0.0", "h:1.1"}, at(4));
  m.on_report(report("h:0.0", 3, Phase::kSync, 2, 2, 11), at(4));
  CHECK(m.snapshot(at(4)).phase == Phase::kRecovery);
  m.on_report(report("h:0.0", 4, Phase::kTraining, 2, 2, 11), at(5));
  JobSnapshot s = m.snapshot(at(6));
  CHECK(s.phase == Phase::kTraining);
  REQUIRE(s.recovery_seconds.size() == 1);
  CHECK(s.recovery_seconds[0] == Approx(3));  // failure seen at 2 s, training again at 5 s
  CHECK(s.phase_seconds[static_cast<int>(Phase::kRecovery)] == Approx(3));
  CHECK(s.failures == 2);
  // A failure after training ended (the job goes on to finish) is no recovery.
  m.on_failure("h:0.0", false, at(7));
  CHECK(m.snapshot(at(7)).phase == Phase::kTraining);
}

TEST_CASE("metrics: exposition, CSV and report formats", "[launcher][metrics]") {
  const auto t0 = MetricsClock::now();
  JobMetrics m(t0);
  m.on_generation(4, {"a:0.0", "a:1.0", "b:0.0"}, t0);
  WorkerReport r = report("a:0.0", 1, Phase::kTraining, 4, 3, 10);
  r.recoveries = 2;
  r.recent[0] = edl::metrics::RecoveryRecord{2, 0.3, 1};
  r.recent[1] = edl::metrics::RecoveryRecord{4, 7.0, 0};
  m.on_report(r, t0 + 1s);
  const JobSnapshot s = m.snapshot(t0 + 2s);
  const std::string text = edl::launcher::prometheus_text(s);
  INFO(text);
  CHECK(sample(text, "edl_world_size") == 3.0);
  CHECK(sample(text, "edl_generation") == 4.0);
  CHECK(sample(text, "edl_recoveries_total") == 2.0);
  CHECK(sample(text, "edl_recovery_seconds_bucket{le=\"0.5\"}") == 1.0);
  CHECK(sample(text, "edl_recovery_seconds_bucket{le=\"5\"}") == 1.0);
  CHECK(sample(text, "edl_recovery_seconds_bucket{le=\"10\"}") == 2.0);
  CHECK(sample(text, "edl_recovery_seconds_bucket{le=\"+Inf\"}") == 2.0);
  CHECK(sample(text, "edl_recovery_seconds_count") == 2.0);
  CHECK(sample(text, "edl_recovery_seconds_sum") == Approx(7.3));
  CHECK(sample(text, "edl_worker_step_seconds{worker=\"a:0.0\"}") == Approx(0.1));
  CHECK(sample(text, "edl_store_op_seconds_count") == 10.0);
  CHECK(text.find("# TYPE edl_steps_total counter\n") != std::string::npos);
  CHECK(text.find("# TYPE edl_recovery_seconds histogram\n") != std::string::npos);
  CHECK(text.find("# TYPE edl_store_op_seconds summary\n") != std::string::npos);
  CHECK(count_of(text, "# TYPE edl_store_op_seconds_count") == 0);  // part of the summary, no TYPE of its own
  // Every sample line of the exposition: NAME[{labels}] VALUE.
  for (const auto& line : lines_of(text)) {
    if (line.empty() || line[0] == '#') continue;
    INFO(line);
    CHECK(std::regex_match(line, std::regex(R"(edl_[a-z_]+(\{[a-z_]+="[^"]*"\})? (-?[0-9.e+-]+|NaN|[+-]Inf))")));
  }
  // CSV: one column per job-wide sample.
  const auto header = split(lines_of(edl::launcher::csv_header())[0], ',');
  const auto row = split(lines_of(edl::launcher::csv_row(s))[0], ',');
  CHECK(header.size() == row.size());
  CHECK(header[0] == "time_s");
  CHECK(std::find(header.begin(), header.end(), "edl_steps_per_second") != header.end());
  // JSON report: every documented field.
  auto j = nlohmann::json::parse(edl::launcher::goodput_json(s, 0));
  for (const char* f : {"wall_seconds", "training_seconds", "rendezvous_seconds", "sync_seconds", "recovery_seconds",
                        "steps_replayed", "failures", "joins", "leaves", "mean_world_size",
                        "effective_training_time_ratio", "goodput_samples_per_second", "goodput_ratio", "exit_code"}) {
    INFO(f);
    CHECK(j.contains(f));
  }
  CHECK(j["recoveries"] == 2);
  CHECK(edl::launcher::format_number(std::nan("")) == "NaN");
  CHECK(edl::launcher::format_number(3) == "3");
}

TEST_CASE("metrics: straggler reports and the autoscaling advice are exported", "[launcher][metrics]") {
  const auto t0 = MetricsClock::now();
  JobMetrics m(t0);
  m.on_generation(1, {"a:0.0", "a:1.0"}, t0);
  std::string text = edl::launcher::prometheus_text(m.snapshot(t0 + 1s));
  CHECK(sample(text, "edl_straggler_reports_total") == 0.0);
  CHECK(sample(text, "edl_recommended_world_size") == 0.0);  // no decision yet
  CHECK(std::isnan(sample(text, "edl_scaling_efficiency").value_or(0)));
  m.on_straggler_report();
  m.on_straggler_report();
  m.on_advice(3, 0.82);
  text = edl::launcher::prometheus_text(m.snapshot(t0 + 2s));
  INFO(text);
  CHECK(sample(text, "edl_straggler_reports_total") == 2.0);
  CHECK(sample(text, "edl_recommended_world_size") == 3.0);
  CHECK(sample(text, "edl_scaling_efficiency") == Approx(0.82));
  m.on_advice(2, -1);  // a decision without a measured efficiency (e.g. a probe)
  text = edl::launcher::prometheus_text(m.snapshot(t0 + 3s));
  CHECK(sample(text, "edl_recommended_world_size") == 2.0);
  CHECK(std::isnan(sample(text, "edl_scaling_efficiency").value_or(0)));
}

TEST_CASE("metrics: report datagrams from older and newer senders decode", "[launcher][metrics]") {
  WorkerReport r = report("w:0.0", 7, Phase::kSync, 3, 2, 5);
  std::string bytes = edl::metrics::encode(r);
  WorkerReport out;
  REQUIRE(edl::metrics::decode(bytes.data(), bytes.size(), &out));
  CHECK(std::string(out.worker_id) == "w:0.0");
  CHECK(out.steps == 5);
  CHECK(static_cast<Phase>(out.phase) == Phase::kSync);
  std::string newer = bytes + std::string(64, '\x7f');  // a newer sender's extra fields are ignored
  REQUIRE(edl::metrics::decode(newer.data(), newer.size(), &out));
  CHECK(out.generation == 3);
  CHECK_FALSE(edl::metrics::decode(bytes.data(), 16, &out));  // too short
  std::string bad = bytes;
  bad[0] ^= 1;  // not a report
  CHECK_FALSE(edl::metrics::decode(bad.data(), bad.size(), &out));
}

TEST_CASE("metrics: bad metrics flags and variables exit 2 naming them", "[launcher][metrics]") {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--metrics-port", "abc"}, "--metrics-port"},
      {{"--metrics-port", "70000"}, "--metrics-port"},
      {{"--metrics-port", "-1"}, "--metrics-port"},
      {{"--metrics-port", "1.5"}, "--metrics-port"},
      {{"--metrics-interval", "0"}, "--metrics-interval"},
      {{"--metrics-interval", "fast"}, "--metrics-interval"},
      {{"--metrics-file", ""}, "--metrics-file"},
      {{"--report", ""}, "--report"},
      {{"--metrics-bind", "a b"}, "--metrics-bind"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = c.first;
    for (const char* a : {"-np", "2", "--elastic", "/bin/true"}) args.push_back(a);
    auto r = run_edl(args);
    INFO(c.first[0] << " " << c.first[1] << ": " << r.err);
    CHECK(r.code == 2);
    CHECK(r.err.find(c.second) != std::string::npos);
  }
  // A file that cannot be created, a port that cannot be bound.
  auto r = run_edl({"--metrics-file", "/nonexistent-dir/m.csv", "-np", "1", "--elastic", "/bin/true"});
  CHECK(r.code == 2);
  CHECK(r.err.find("--metrics-file") != std::string::npos);
  // A loopback port held by a listening socket of ours (no SO_REUSEPORT).
  const int holder = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(holder, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  REQUIRE(::listen(holder, 1) == 0);
  socklen_t len = sizeof(a);
  REQUIRE(::getsockname(holder, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  const int busy = ntohs(a.sin_port);
  auto taken = run_edl({"--metrics-port", std::to_string(busy), "-np", "1", "--elastic", "/bin/true"});
  CHECK(taken.code == 2);
  CHECK(taken.err.find("--metrics-port") != std::string::npos);
  ::close(holder);
  // The variables (read by edl-run too, so a bad value fails the job at once).
  for (const char* v : {"EDL_METRICS_INTERVAL_MS=abc", "EDL_METRICS_INTERVAL_MS=0", "EDL_METRICS_ADDR=no-at-sign"}) {
    auto e = run_edl({"-np", "1", "--elastic", "/bin/true"}, 30s, {v});
    INFO(v << ": " << e.err);
    CHECK(e.code == 2);
    CHECK(e.err.find(std::string(v).substr(0, std::string(v).find('='))) != std::string::npos);
  }
}

TEST_CASE("metrics: --metrics-file and --report of an elastic job with a kill -9", "[launcher][metrics][elastic]") {
  Launch l({"--min-np", "2", "--max-np", "3", "-np", "3", "--pid-file", "pids", "--grace-period", "3", "--metrics-file",
            "m.csv", "--metrics-interval", "0.2", "--report", "r.json", kHelper, "elastic-train", "300", "10"},
           {"EDL_COMMIT_EVERY=4"});
  REQUIRE(l.wait_for([](const std::string&, const std::string& err) { return count_of(err, "event=generation") >= 1; },
                     30s));
  // Let it train a little (at least one CSV row with steps), then kill one worker.
  REQUIRE(l.wait_for([&](const std::string&, const std::string&) { return lines_of(edl::test::read_file(l.dir() + "/m.csv")).size() >= 3; }, 30s));
  auto pids = lines_of(edl::test::read_file(l.dir() + "/pids"));
  REQUIRE(pids.size() == 3);
  std::istringstream first(pids[1]);
  int slot = 0;
  pid_t victim = 0;
  first >> slot >> victim;
  REQUIRE(kill(victim, SIGKILL) == 0);
  auto r = l.wait(90s);
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(count_of(r.err, "event=report ") == 1);

  auto j = nlohmann::json::parse(edl::test::read_file(l.dir() + "/r.json"));
  INFO(j.dump(2));
  CHECK(j["exit_code"] == 0);
  CHECK(j["failures"].get<int>() >= 1);
  CHECK(j["restarts"].get<int>() >= 1);
  CHECK(j["steps_replayed"].get<double>() >= 0);
  CHECK(j["recoveries"].get<int>() >= 1);  // the survivors recovered into a new generation
  const double wall = j["wall_seconds"], training = j["training_seconds"];
  CHECK(training > 0);
  CHECK(training <= wall);
  const double parts = training + j["rendezvous_seconds"].get<double>() + j["sync_seconds"].get<double>() +
                       j["recovery_seconds"].get<double>() + j["done_seconds"].get<double>();
  CHECK(parts == Approx(wall).epsilon(0.01));
  CHECK(j["effective_training_time_ratio"].get<double>() == Approx(training / wall));
  const double mean = j["mean_world_size"];
  CHECK(mean >= j["min_world_size"].get<double>());
  CHECK(mean <= j["max_world_size"].get<double>());
  CHECK(j["max_world_size"].get<int>() <= 3);
  CHECK(j["steps"].get<double>() >= 300 * 0.9);  // replays included; a killed worker's last batches may go unreported
  CHECK(j["samples_committed"].get<double>() > 0);
  CHECK(j["goodput_samples_per_second"].get<double>() > 0);

  // The CSV: a header, rows of the same width, steps never going back, world sizes within bounds.
  auto rows = lines_of(edl::test::read_file(l.dir() + "/m.csv"));
  REQUIRE(rows.size() >= 4);
  const auto header = split(rows[0], ',');
  const size_t steps_col = std::find(header.begin(), header.end(), "edl_steps_total") - header.begin();
  const size_t size_col = std::find(header.begin(), header.end(), "edl_world_size") - header.begin();
  REQUIRE(steps_col < header.size());
  REQUIRE(size_col < header.size());
  double last_steps = -1;
  for (size_t i = 1; i < rows.size(); ++i) {
    const auto cells = split(rows[i], ',');
    INFO(rows[i]);
    REQUIRE(cells.size() == header.size());
    const double steps = std::stod(cells[steps_col]);
    CHECK(steps >= last_steps);
    last_steps = steps;
    const int size = std::stoi(cells[size_col]);
    CHECK(size >= 0);
    CHECK(size <= 3);
  }
  CHECK(last_steps == Approx(j["steps"].get<double>()));  // the last row is written at the end, with the report
}

TEST_CASE("metrics: a real Prometheus server scrapes edl-run during a job", "[launcher][metrics][prometheus]") {
  if (!edl::testing::require_program("prometheus") || !edl::testing::require_program("promtool")) return;
  Launch l({"--elastic", "-np", "3", "--grace-period", "5", "--metrics-port", "0", kHelper, "elastic-train", "1000000",
            "10"});
  std::string url;
  REQUIRE(l.wait_for([&](const std::string&, const std::string& err) {
    auto p = err.find("event=metrics url=http://");
    if (p == std::string::npos) return false;
    auto end = err.find('\n', p);
    url = err.substr(p + 25, end - p - 25);  // 127.0.0.1:PORT/metrics
    return end != std::string::npos;
  }, 30s));
  const std::string target = url.substr(0, url.find('/'));
  const int port = std::stoi(target.substr(target.find(':') + 1));
  REQUIRE(l.wait_for([](const std::string&, const std::string& err) { return count_of(err, "event=generation") >= 1; }, 30s));

  edl::test::PrometheusServer prom(target);
  REQUIRE(prom.available());
  std::optional<double> v;
  INFO(prom.log());
  CHECK(prom.wait_for("edl_world_size", [](double x) { return x == 3; }, 60s, &v));
  CHECK(v == 3.0);
  // The step rate, computed by Prometheus from the scraped counter, and edl-run's own gauge.
  CHECK(prom.wait_for("rate(edl_steps_total[5s])", [](double x) { return x > 0; }, 60s, &v));
  CHECK(prom.wait_for("edl_steps_per_second", [](double x) { return x > 0; }, 60s, &v));
  CHECK(prom.wait_for("count(edl_worker_step_seconds)", [](double x) { return x == 3; }, 60s, &v));
  CHECK(prom.wait_for("up{job=\"edl\"}", [](double x) { return x == 1; }, 10s, &v));

  // promtool accepts the exposition as served.
  httplib::Client c("127.0.0.1", port);
  auto res = c.Get("/metrics");
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(res->get_header_value("Content-Type").find("text/plain; version=0.0.4") == 0);
  const std::string file = l.dir() + "/exposition.txt";
  std::ofstream(file) << res->body;
  auto check = edl::testing::run_command({"sh", "-c", "promtool check metrics < '" + file + "'"});
  INFO(res->body);
  INFO(check.output);
  CHECK(check.status == 0);

  kill(l.pid(), SIGTERM);  // workers leave gracefully; edl-run ends with 128 + SIGTERM and prints its report
  auto r = l.wait(60s);
  INFO(r.err);
  CHECK(r.code == 128 + SIGTERM);
  CHECK(count_of(r.err, "event=report ") == 1);
}
