#include "doc_util.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

namespace edl::docs {

namespace fs = std::filesystem;

namespace {

Rows load_rows(const fs::path& path) {
  Rows rows;
  std::ifstream f(path);
  std::string line;
  int n = 0;
  while (std::getline(f, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Json j = Json::parse(line, nullptr, false);
    if (j.is_object()) {
      rows.push_back(std::move(j));
    } else {
      std::cerr << "benchmarks_doc: " << path.string() << ":" << n << ": not a JSON object, skipped\n";
    }
  }
  return rows;
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> parts;
  std::string p;
  std::stringstream ss(line);
  while (std::getline(ss, p, '\t')) parts.push_back(p);
  return parts;
}

}  // namespace

std::string provenance_line(const Provenance& p) {
  std::ostringstream s;
  if (p.status == "skipped") {
    s << "Not run in this data set (skipped: " << p.note << ").";
    return s.str();
  }
  s << (p.status == "ran" ? "Ran" : "**Failed** (" + p.note + ")");
  if (!p.commit.empty()) s << " at commit `" << p.commit << "`";
  if (!p.start.empty()) s << ", started " << p.start;
  if (!p.wall_s.empty()) s << ", " << p.wall_s << " s";
  if (!p.load_start.empty()) s << ", load average " << p.load_start << " at start / " << p.load_end << " at end";
  s << "; command: `" << p.command << "`.";
  return s.str();
}

const Rows& DataSet::of(const std::string& bench) const {
  static const Rows kEmpty;
  auto it = rows.find(bench);
  return it == rows.end() ? kEmpty : it->second;
}

std::string DataSet::provenance(const std::string& bench) const {
  auto it = status.find(bench);
  if (it == status.end()) {
    return rows.count(bench) ? "No provenance: docs/data/status.tsv does not name this bench, so where its rows come "
                               "from is unknown."
                             : "Not run in this data set.";
  }
  return provenance_line(it->second);
}

DataSet load_dataset(const std::string& dir) {
  DataSet d;
  d.dir = dir;
  std::vector<fs::path> files;
  if (fs::is_directory(dir)) {
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.is_regular_file() && e.path().extension() == ".jsonl") files.push_back(e.path());
    }
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) d.rows[f.stem().string()] = load_rows(f);
  std::ifstream st(fs::path(dir) / "status.tsv");
  for (std::string line; std::getline(st, line);) {
    auto p = split_tabs(line);
    if (p.size() < 2) continue;
    p.resize(9);
    d.status[p[0]] = {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8]};
  }
  std::ifstream m(fs::path(dir) / "machine.txt");
  std::getline(m, d.machine);
  return d;
}

std::string fixed(double v, int decimals) {
  if (std::isnan(v)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string s = buf;
  if (s.find_first_not_of("-0.") == std::string::npos) s = s[0] == '-' ? s.substr(1) : s;  // no "-0.00"
  return s;
}

std::string signed_fixed(double v, int decimals) {
  std::string s = fixed(v, decimals);
  return (s[0] == '-' || s == "n/a") ? s : "+" + s;
}

std::string cell(const Json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  if (v.is_number_integer() || v.is_number_unsigned()) return v.dump();
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::fabs(d) < 1e-9) d = 0;
    char buf[32];
    if (d != 0 && (std::fabs(d) >= 1e6 || std::fabs(d) < 1e-3)) {
      std::snprintf(buf, sizeof buf, "%.3g", d);
    } else {
      std::snprintf(buf, sizeof buf, std::fabs(d) >= 100 ? "%.1f" : "%.3f", d);
    }
    return buf;
  }
  return v.dump();
}

void table(std::ostream& out, const Rows& rows, std::vector<std::string> cols, size_t max_rows) {
  if (cols.empty()) {
    std::set<std::string> seen;
    for (const Json& r : rows) {
      for (auto it = r.begin(); it != r.end(); ++it) {
        if (seen.insert(it.key()).second) cols.push_back(it.key());
      }
    }
  }
  if (rows.empty() || cols.empty()) return;
  std::vector<std::vector<std::string>> body;
  for (size_t i = 0; i < rows.size() && i < max_rows; ++i) {
    std::vector<std::string> line;
    for (const auto& k : cols) line.push_back(rows[i].contains(k) ? cell(rows[i][k]) : "");
    body.push_back(std::move(line));
  }
  table(out, cols, body);
  if (rows.size() > max_rows) out << "(" << rows.size() - max_rows << " more rows in the JSON file)\n\n";
}

void table(std::ostream& out, const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& body) {
  if (body.empty()) return;
  out << "\n|";
  for (const auto& k : header) out << ' ' << k << " |";
  out << "\n|";
  for (size_t i = 0; i < header.size(); ++i) out << "---|";
  out << "\n";
  for (const auto& line : body) {
    out << "|";
    for (const auto& c : line) out << ' ' << c << " |";
    out << "\n";
  }
  out << "\n";
}

Rows having(const Rows& rows, const std::string& key) {
  Rows out;
  for (const Json& r : rows) {
    if (r.contains(key)) out.push_back(r);
  }
  return out;
}

Rows matching(const Rows& rows, const std::string& key, const Json& value) {
  Rows out;
  for (const Json& r : rows) {
    if (r.contains(key) && r[key] == value) out.push_back(r);
  }
  return out;
}

double num(const Json& row, const std::string& key, double fallback) {
  if (!row.contains(key) || !row[key].is_number()) return fallback;
  return row[key].get<double>();
}

double median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string median_range(std::vector<double> v, int decimals, const std::string& unit) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
  if (v.empty()) return "no rows";
  std::sort(v.begin(), v.end());
  return fixed(median(v), decimals) + " (" + fixed(v.front(), decimals) + "-" + fixed(v.back(), decimals) + ", " +
         std::to_string(v.size()) + " " + unit + ")";
}

Plots::Plots(std::string img_dir, std::string img_rel, std::string data_rel)
    : img_dir_(std::move(img_dir)), img_rel_(std::move(img_rel)), data_rel_(std::move(data_rel)) {}

std::string Plots::add(const std::string& name, const std::string& body, const std::string& caption, int w, int h) {
  fs::create_directories(img_dir_);
  std::ofstream f(fs::path(img_dir_) / (name + ".gp"));
  f << "# Generated by experiments/benchmarks_doc from docs/data; run gnuplot in docs/.\n"
    << "set terminal pngcairo size " << w << "," << h << " font 'sans,10' noenhanced\n"
    << "set output '" << img_rel_ << "/" << name << ".png'\n"
    << "set grid\nset key outside right top\n"
    << body << "\n";
  names_.push_back(name);
  captions_[name] = caption;
  return link(name, caption);
}

std::string Plots::caption(const std::string& name) const {
  auto it = captions_.find(name);
  return it == captions_.end() ? "" : it->second;
}

std::string Plots::link(const std::string& name, const std::string& caption) const {
  return "\n![" + caption + "](" + img_rel_ + "/" + name + ".png)\n\n";
}

std::string datablock(const std::string& name, const Series& xy) {
  std::ostringstream s;
  s << "$" << name << " << EOD\n";
  char buf[64];
  for (const auto& [x, y] : xy) {
    std::snprintf(buf, sizeof buf, "%.6g %.6g\n", x, y);
    s << buf;
  }
  s << "EOD\n";
  return s.str();
}

std::string ident(std::string s) {
  for (char& ch : s) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return s;
}

}  // namespace edl::docs
