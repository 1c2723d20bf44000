#include "convergence_analysis.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace edl::bench::convergence {

std::vector<ResizePoint> parse_resize_plan(const std::string& text, int start_workers) {
  if (start_workers < 1) throw std::invalid_argument("start worker count must be >= 1, got " + std::to_string(start_workers));
  std::vector<ResizePoint> plan;
  std::stringstream in(text);
  std::string item;
  int prev_workers = start_workers;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    auto colon = item.find(':');
    if (colon == std::string::npos) throw std::invalid_argument("resize point '" + item + "' is not PROGRESS:WORKERS");
    ResizePoint p;
    try {
      size_t used_at = 0, used_w = 0;
      p.at = std::stod(item.substr(0, colon), &used_at);
      p.workers = std::stoi(item.substr(colon + 1), &used_w);
      if (used_at != colon || used_w != item.size() - colon - 1) throw std::invalid_argument("trailing characters");
    } catch (const std::exception&) {
      throw std::invalid_argument("resize point '" + item + "' is not PROGRESS:WORKERS (numbers)");
    }
    if (!std::isfinite(p.at) || p.at < 0) throw std::invalid_argument("resize point '" + item + "': progress must be >= 0");
    if (p.workers < 1) throw std::invalid_argument("resize point '" + item + "': workers must be >= 1");
    if (!plan.empty() && p.at <= plan.back().at)
      throw std::invalid_argument("resize point '" + item + "': progress must increase along the list");
    if (p.workers == prev_workers)
      throw std::invalid_argument("resize point '" + item + "' does not change the worker count (" +
                                  std::to_string(prev_workers) + ")");
    prev_workers = p.workers;
    plan.push_back(p);
  }
  return plan;
}

int workers_due(const std::vector<ResizePoint>& plan, int start_workers, double progress) {
  int w = start_workers;
  for (const ResizePoint& p : plan) {
    if (progress >= p.at) w = p.workers;
  }
  return w;
}

std::optional<LossPoint> parse_loss_row(const std::string& line) {
  if (line.find_first_not_of(" \t\r") == std::string::npos) return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  for (const char* k : {"step", "epoch_progress", "loss", "workers"}) {
    if (!j.contains(k) || !j[k].is_number()) return std::nullopt;
  }
  LossPoint p;
  p.step = j["step"].get<int64_t>();
  p.epoch_progress = j["epoch_progress"].get<double>();
  p.loss = j["loss"].get<double>();
  p.workers = j["workers"].get<int>();
  return p;
}

std::vector<LossPoint> normalize(std::vector<LossPoint> s) {
  // Stable sort keeps the file order inside a step; then keep the last of each run of equal steps.
  std::stable_sort(s.begin(), s.end(), [](const LossPoint& a, const LossPoint& b) { return a.step < b.step; });
  std::vector<LossPoint> out;
  for (const LossPoint& p : s) {
    if (!out.empty() && out.back().step == p.step) {
      out.back() = p;
    } else {
      out.push_back(p);
    }
  }
  return out;
}

std::vector<ResizeEvent> detect_resizes(const std::vector<LossPoint>& s) {
  std::vector<ResizeEvent> ev;
  for (size_t i = 1; i < s.size(); ++i) {
    if (s[i].workers != s[i - 1].workers) ev.push_back({i, s[i - 1].workers, s[i].workers, s[i].step, s[i].epoch_progress});
  }
  return ev;
}

namespace {
Summary summarize(const std::vector<double>& v) {
  Summary r;
  r.n = static_cast<int>(v.size());
  if (v.empty()) return r;
  double sum = 0;
  for (double x : v) {
    sum += x;
    if (x < 0) ++r.below;
  }
  r.mean = sum / static_cast<double>(v.size());
  if (v.size() > 1) {
    double ss = 0;
    for (double x : v) ss += (x - r.mean) * (x - r.mean);
    r.sd = std::sqrt(ss / static_cast<double>(v.size() - 1));
  }
  return r;
}

double mean_loss(const std::vector<LossPoint>& s, size_t begin, size_t end) {
  double sum = 0;
  for (size_t i = begin; i < end; ++i) sum += s[i].loss;
  return end > begin ? sum / static_cast<double>(end - begin) : 0.0;
}
}  // namespace

std::vector<Spike> spikes(const std::vector<LossPoint>& s, int window) {
  if (window < 1) throw std::invalid_argument("spike window must be >= 1 step, got " + std::to_string(window));
  std::vector<ResizeEvent> ev = detect_resizes(s);
  std::vector<Spike> out;
  const size_t w = static_cast<size_t>(window);
  for (size_t e = 0; e < ev.size(); ++e) {
    size_t at = ev[e].index;
    size_t lo = e > 0 ? ev[e - 1].index : 0;                // previous event's first point
    size_t hi = e + 1 < ev.size() ? ev[e + 1].index : s.size();
    size_t b0 = at - std::min(w, at - lo), a1 = at + std::min(w, hi - at);
    Spike k;
    k.event = ev[e];
    k.steps_before = static_cast<int>(at - b0);
    k.steps_after = static_cast<int>(a1 - at);
    k.loss_before = mean_loss(s, b0, at);
    k.loss_after = mean_loss(s, at, a1);
    k.spike = k.loss_after - k.loss_before;
    out.push_back(k);
  }
  return out;
}

Summary paired_difference(const std::vector<LossPoint>& a, const std::vector<LossPoint>& b, int64_t from_step,
                          int window) {
  if (window < 1) throw std::invalid_argument("paired window must be >= 1 step, got " + std::to_string(window));
  std::map<int64_t, double> b_loss;
  for (const auto& p : b) b_loss[p.step] = p.loss;
  std::vector<double> d;
  int taken = 0;
  for (const auto& p : a) {
    if (p.step < from_step) continue;
    if (taken == window) break;
    ++taken;
    auto it = b_loss.find(p.step);
    if (it != b_loss.end()) d.push_back(p.loss - it->second);
  }
  return summarize(d);
}

Summary spike_noise(const std::vector<LossPoint>& s, int window, double from_progress, double to_progress) {
  if (window < 1) throw std::invalid_argument("noise window must be >= 1 step, got " + std::to_string(window));
  const size_t w = static_cast<size_t>(window);
  std::vector<double> v;
  for (size_t i = w; i + w <= s.size(); ++i) {
    if (s[i].epoch_progress < from_progress || s[i].epoch_progress > to_progress) continue;
    v.push_back(mean_loss(s, i, i + w) - mean_loss(s, i - w, i));
  }
  return summarize(v);
}

}  // namespace edl::bench::convergence
