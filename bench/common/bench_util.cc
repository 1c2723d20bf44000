#include "common/bench_util.h"


#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <stdexcept>

namespace edl::bench {

JsonRows::JsonRows(const std::string& path) {
  if (path.empty()) return;
  out_.open(path, std::ios::out | std::ios::app);
  if (!out_) throw std::runtime_error("cannot open --json file '" + path + "' for writing");
}

void JsonRows::write(const Json& row) {
  if (!out_.is_open()) return;
  out_ << row.dump() << '\n';
  out_.flush();
}

Table::Table(std::vector<std::string> columns, int width) : columns_(std::move(columns)), width_(width) {}

void Table::header() const {
  row(columns_);
}

void Table::row(const std::vector<std::string>& cells) const {
  std::ostringstream os;
  for (const auto& c : cells) {
    os.width(width_);
    os << c;
  }
  std::cout << os.str() << std::endl;
}

std::string fmt(double v, int precision) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(precision);
  os << v;
  return os.str();
}

std::vector<std::string> split(const std::string& csv) {
  std::vector<std::string> out;
  std::stringstream ss(csv);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

double median(std::vector<double> v) {
  return quantile(std::move(v), 0.5);
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) throw std::invalid_argument("quantile of an empty sample");
  std::sort(v.begin(), v.end());
  size_t idx = static_cast<size_t>(std::lround(q * static_cast<double>(v.size() - 1)));
  return v[std::min(idx, v.size() - 1)];
}

cxxopts::ParseResult parse_flags(cxxopts::Options& options, int argc, char** argv) {
  const std::string program = argc > 0 ? argv[0] : "bench";
  try {
    auto result = options.parse(argc, argv);
    if (!result.unmatched().empty())
      throw cxxopts::exceptions::exception("unexpected argument '" + result.unmatched()[0] + "'");
    return result;
  } catch (const cxxopts::exceptions::exception& e) {
    std::fprintf(stderr, "%s: %s (run with --help for usage)\n", program.c_str(), e.what());
    std::exit(2);
  }
}

}  // namespace edl::bench
