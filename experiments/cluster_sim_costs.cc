// Cost models of the cluster simulator: the fitted scaling curve, the resize pause table, the JSONL
// loaders for EDL's measured numbers and the seed's published numbers.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "cluster_sim.h"

namespace edl::bench::sim {
namespace {

// Cost-model basis functions of r(k) = alpha * bw(k) + beta * lat(k).
double bw_term(int k) { return 2.0 * (k - 1) / k; }
double lat_term(int k) { return static_cast<double>(k - 1); }

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Least squares of y ~ a * x (one basis function); returns a and the residual sum of squares.
std::pair<double, double> fit_one(const std::vector<double>& x, const std::vector<double>& y) {
  double xx = 0, xy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    xx += x[i] * x[i];
    xy += x[i] * y[i];
  }
  double a = xx > 0 ? std::max(0.0, xy / xx) : 0.0;
  double sse = 0;
  for (size_t i = 0; i < x.size(); ++i) sse += (y[i] - a * x[i]) * (y[i] - a * x[i]);
  return {a, sse};
}

}  // namespace

ScalingCurve ScalingCurve::fit(const std::map<int, double>& measured, int fit_max_workers) {
  ScalingCurve c;
  c.points_[1] = 1.0;
  for (const auto& [k, s] : measured) {
    if (k < 1) throw std::invalid_argument("scaling point with workers=" + std::to_string(k) + " (must be >= 1)");
    if (!(s > 0)) throw std::invalid_argument("scaling point workers=" + std::to_string(k) +
                                              " has non-positive speedup " + std::to_string(s));
    if (fit_max_workers > 0 && k > fit_max_workers) continue;
    c.points_[k] = s;
  }
  std::vector<double> bw, lat, r;
  for (const auto& [k, s] : c.points_) {
    if (k == 1) continue;
    bw.push_back(bw_term(k));
    lat.push_back(lat_term(k));
    r.push_back(std::max(0.0, k / s - 1.0));
  }
  if (r.empty()) return c;  // only 1 worker measured: linear scaling is all we can say
  // Two-parameter non-negative least squares over {alpha, beta}: try the full solve, fall back
  // to the better single-term fit when it is singular or leaves a negative coefficient.
  double s11 = 0, s12 = 0, s22 = 0, t1 = 0, t2 = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    s11 += bw[i] * bw[i];
    s12 += bw[i] * lat[i];
    s22 += lat[i] * lat[i];
    t1 += bw[i] * r[i];
    t2 += lat[i] * r[i];
  }
  double det = s11 * s22 - s12 * s12;
  if (r.size() >= 2 && std::fabs(det) > 1e-12) {
    double a = (t1 * s22 - t2 * s12) / det;
    double b = (s11 * t2 - s12 * t1) / det;
    if (a >= 0 && b >= 0) {
      c.alpha_ = a;
      c.beta_ = b;
      return c;
    }
  }
  auto [a, sse_a] = fit_one(bw, r);
  auto [b, sse_b] = fit_one(lat, r);
  if (r.size() == 1 || sse_a <= sse_b) {
    c.alpha_ = a;  // with one point the bandwidth term alone: ring allreduce at small k
  } else {
    c.beta_ = b;
  }
  return c;
}

double ScalingCurve::speedup(int k) const {
  if (k <= 0) return 0.0;
  auto it = points_.find(k);
  if (it != points_.end()) return it->second;
  return k / (1.0 + alpha_ * bw_term(k) + beta_ * lat_term(k));
}

void PauseModel::add(const std::string& kind, int ranks_after, Point p) {
  if (kind == "shrink") {
    shrink_[ranks_after].push_back(p);
  } else if (kind == "grow") {
    grow_[ranks_after].push_back(p);
  } else if (kind == "rendezvous") {
    rendezvous_[ranks_after].push_back(p);
  } else {
    throw std::invalid_argument("PauseModel::add: unknown kind '" + kind + "'");
  }
}

const std::map<int, std::vector<PauseModel::Point>>& PauseModel::table(const std::string& kind) const {
  if (kind == "shrink") return shrink_;
  if (kind == "grow") return grow_;
  if (kind == "rendezvous") return rendezvous_;
  throw std::invalid_argument("PauseModel::table: unknown kind '" + kind + "'");
}

PauseModel::Point PauseModel::lookup(const std::map<int, std::vector<Point>>& t, int n) {
  auto med = [](const std::vector<Point>& v) {
    std::vector<double> s, l;
    for (const Point& p : v) {
      s.push_back(p.seconds);
      l.push_back(p.lost_steps);
    }
    return Point{median_of(s), median_of(l)};
  };
  auto exact = t.find(n);
  if (exact != t.end()) return med(exact->second);
  if (t.size() == 1) return med(t.begin()->second);
  // Two neighbours around n (or the two nearest on one side) and a straight line through them.
  auto hi = t.lower_bound(n);
  if (hi == t.end()) --hi;
  if (hi == t.begin()) ++hi;
  auto lo = std::prev(hi);
  Point a = med(lo->second), b = med(hi->second);
  double f = static_cast<double>(n - lo->first) / (hi->first - lo->first);
  Point p{a.seconds + f * (b.seconds - a.seconds), a.lost_steps + f * (b.lost_steps - a.lost_steps)};
  p.seconds = std::max(0.0, p.seconds);
  p.lost_steps = std::max(0.0, p.lost_steps);
  return p;
}

PauseModel::Point PauseModel::lookup_or_rendezvous(const std::map<int, std::vector<Point>>& t, int n) const {
  if (!t.empty()) return lookup(t, n);
  if (!rendezvous_.empty()) return lookup(rendezvous_, n);
  throw std::runtime_error("pause model has no rows for this resize and no rerendezvous rows to fall back on");
}

PauseModel::Point PauseModel::shrink(int before, int after) const {
  (void)before;
  return lookup_or_rendezvous(shrink_, after);
}

PauseModel::Point PauseModel::grow(int before, int after) const {
  (void)before;
  Point p = lookup_or_rendezvous(grow_, after);
  p.lost_steps = 0;  // joins happen at step boundaries: nothing is redone
  return p;
}

int ServingDemand::at(double t) const {
  int d = 0;
  for (const auto& [t0, g] : steps) {
    if (t0 > t) break;
    d = g;
  }
  return d;
}

const char* policy_name(Policy p) { return p == Policy::kGang ? "gang" : "elastic"; }

namespace {

template <typename F>
void for_each_row(const std::string& path, F&& f) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open '" + path + "'");
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json row;
    try {
      row = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      throw std::runtime_error(path + ":" + std::to_string(lineno) + ": not a JSON object: " + e.what());
    }
    if (!row.is_object()) throw std::runtime_error(path + ":" + std::to_string(lineno) + ": not a JSON object");
    try {
      f(row);
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error(path + ":" + std::to_string(lineno) + ": bad field: " + e.what());
    }
  }
}

}  // namespace

ScalingRows load_scaling(const std::string& path, const std::string& model, const std::string& link) {
  std::map<int, std::vector<double>> sp;
  std::vector<double> ips1;
  for_each_row(path, [&](const nlohmann::json& row) {
    if (!row.contains("speedup") || !row.contains("workers")) return;  // rows of another kind
    if (row.at("model").get<std::string>() != model || row.at("link").get<std::string>() != link) return;
    int k = row.at("workers").get<int>();
    sp[k].push_back(row.at("speedup").get<double>());
    if (k == 1) ips1.push_back(row.at("images_per_s").get<double>());
  });
  if (ips1.empty()) {
    throw std::runtime_error(path + ": no scaling row with model '" + model + "', link '" + link +
                             "' and workers 1 (needed for the step time)");
  }
  ScalingRows out;
  for (auto& [k, v] : sp) out.speedup[k] = median_of(v);
  out.images_per_s_1 = median_of(ips1);
  return out;
}

PauseModel load_pauses(const std::string& path) {
  PauseModel m;
  for_each_row(path, [&](const nlohmann::json& row) {
    if (!row.contains("event")) return;
    std::string ev = row.at("event").get<std::string>();
    if (ev == "kill" || ev == "stop" || ev == "join") {
      int before = row.at("ranks_before").get<int>(), after = row.at("ranks_after").get<int>();
      PauseModel::Point p{row.at("recovery_ms").get<double>() / 1000.0, row.value("lost_steps", 0.0)};
      // SIGSTOP rows include the lease expiry of a silent worker; a preempted pod is killed, so
      // only "kill" rows describe the shrink the scheduler causes.
      if (ev == "kill" && after < before) m.add("shrink", after, p);
      if (ev == "join" && after > before) m.add("grow", after, p);
    } else if (ev == "rerendezvous") {
      m.add("rendezvous", row.at("ranks").get<int>(), {row.at("time_ms").get<double>() / 1000.0, 0.0});
    }
  });
  if (m.empty()) throw std::runtime_error(path + ": no kill, join or rerendezvous rows");
  return m;
}

Costs seed_costs() {
  Costs c;
  c.name = "seed";
  // FTlib benchmark (seed 002), on-premise GPU cluster, ResNet50, "Horovod Speed" column:
  // 145 / 185 / 364 images/s at 1 / 2 / 4 workers.
  c.curve = ScalingCurve::fit({{1, 1.0}, {2, 185.0 / 145.0}, {4, 364.0 / 145.0}});
  // Horovod elastic re-rendezvous (horovod #3556): 0.4 s @2, 1.2 s @4, 7.1 s @8, 15.8 s @16.
  // No lost-step figure is published: Horovod restores the last commit; we count 0.
  for (auto [n, s] : std::vector<std::pair<int, double>>{{2, 0.4}, {4, 1.2}, {8, 7.1}, {16, 15.8}}) {
    c.pause.add("rendezvous", n, {s, 0.0});
  }
  c.step_s = 64.0 / 145.0;  // batch 64 at 145 images/s
  c.launch_s = 53;          // Experiment 1: "the latter job waits for 53s ... launch the master pod"
  c.checkpoint_every_s = 60;
  return c;
}

}  // namespace edl::bench::sim
