#include "launcher/goodput_report.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "launcher/metrics_exposition.h"

namespace edl::launcher {
namespace {

using metrics::Phase;

double phase_s(const JobSnapshot& s, Phase p) { return s.phase_seconds[static_cast<int>(p)]; }

}  // namespace

std::string goodput_json(const JobSnapshot& s, int exit_code) {
  nlohmann::json j;
  j["exit_code"] = exit_code;
  j["wall_seconds"] = s.uptime_seconds;
  j["training_seconds"] = phase_s(s, Phase::kTraining);
  j["rendezvous_seconds"] = phase_s(s, Phase::kStarting) + phase_s(s, Phase::kRendezvous);
  j["sync_seconds"] = phase_s(s, Phase::kSync);
  j["recovery_seconds"] = phase_s(s, Phase::kRecovery);
  j["done_seconds"] = phase_s(s, Phase::kDone);
  j["steps"] = s.steps_total;
  j["steps_replayed"] = s.steps_replayed;
  j["samples"] = s.samples_total;
  j["samples_committed"] = s.samples_committed;
  j["failures"] = s.failures;
  j["restarts"] = s.restarts;
  j["recoveries"] = s.recovery_seconds.size();
  j["recovery_durations_seconds"] = s.recovery_seconds;
  j["joins"] = s.joins;
  j["leaves"] = s.leaves;
  j["generation"] = s.generation;
  j["mean_world_size"] = s.mean_world_size;
  j["min_world_size"] = s.min_world_size;
  j["max_world_size"] = s.max_world_size;
  j["effective_training_time_ratio"] = s.effective_training_ratio;
  j["goodput_samples_per_second"] = s.goodput_samples_per_second;
  j["goodput_ratio"] = s.goodput_ratio ? nlohmann::json(*s.goodput_ratio) : nlohmann::json(nullptr);
  nlohmann::json sizes = nlohmann::json::object();
  for (const auto& kv : s.per_size) {
    nlohmann::json e;
    e["training_seconds"] = kv.second.seconds;
    e["wall_seconds"] = kv.second.wall_seconds;
    e["samples_per_second"] =
        kv.second.seconds > 0 ? nlohmann::json(kv.second.samples / kv.second.seconds) : nlohmann::json(nullptr);
    e["steps_per_second"] =
        kv.second.seconds > 0 ? nlohmann::json(kv.second.steps / kv.second.seconds) : nlohmann::json(nullptr);
    sizes[std::to_string(kv.first)] = e;
  }
  j["per_world_size"] = sizes;
  return j.dump(2) + "\n";
}

std::string goodput_line(const JobSnapshot& s) {
  auto f = [](double v) {
    char b[32];
    std::snprintf(b, sizeof(b), "%.3f", v);
    return std::string(b);
  };
  return "wall_s=" + f(s.uptime_seconds) + " training_s=" + f(phase_s(s, Phase::kTraining)) +
         " rendezvous_s=" + f(phase_s(s, Phase::kStarting) + phase_s(s, Phase::kRendezvous)) +
         " sync_s=" + f(phase_s(s, Phase::kSync)) + " recovery_s=" + f(phase_s(s, Phase::kRecovery)) +
         " steps=" + format_number(std::round(s.steps_total)) + " steps_replayed=" + format_number(s.steps_replayed) +
         " failures=" + std::to_string(s.failures) + " joins=" + std::to_string(s.joins) +
         " leaves=" + std::to_string(s.leaves) + " mean_world_size=" + f(s.mean_world_size) +
         " effective_training_ratio=" + f(s.effective_training_ratio) +
         " goodput_samples_per_s=" + f(s.goodput_samples_per_second) +
         " goodput_ratio=" + (s.goodput_ratio ? f(*s.goodput_ratio) : std::string("unknown"));
}

void write_goodput_report(const std::string& path, const JobSnapshot& s, int exit_code) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) throw std::runtime_error("cannot write the report " + tmp + ": " + std::strerror(errno));
  const std::string text = goodput_json(s, exit_code);
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok || std::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::runtime_error("cannot write the report " + path + ": " + std::strerror(errno));
}

}  // namespace edl::launcher
