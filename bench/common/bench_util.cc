#include "common/bench_util.h"

#include <dirent.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
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

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_file(const std::string& path, const std::string& text) {
  {
    std::ofstream f(path + ".tmp");
    f << text;
  }
  std::rename((path + ".tmp").c_str(), path.c_str());
}

int parent_of(int pid) {
  std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  auto close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(stat.substr(close + 1));
  std::string state;
  long ppid = -1;
  rest >> state >> ppid;
  if (state == "Z") return -1;  // dead, not yet reaped
  return static_cast<int>(ppid);
}

double cpu_ms_of(int pid) {
  std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  auto close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {  // fields 14 and 15: utime, stime (clock ticks)
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  return (utime + stime) * 1000.0 / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

int sockets_of(int pid) {
  std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return -1;
  int n = 0;
  char buf[64];
  while (dirent* e = ::readdir(d)) {
    ssize_t len = ::readlink((dir + "/" + e->d_name).c_str(), buf, sizeof(buf) - 1);
    if (len > 7 && std::string(buf, 7) == "socket:") ++n;
  }
  ::closedir(d);
  return n;
}

std::vector<std::string> LineTail::new_lines() {
  std::vector<std::string> lines;
  std::ifstream f(path_, std::ios::binary);
  if (!f) return lines;
  f.seekg(offset_);
  std::string chunk((std::istreambuf_iterator<char>(f)), {});
  const size_t end = chunk.rfind('\n');
  if (end == std::string::npos) return lines;
  offset_ += static_cast<long long>(end + 1);
  std::istringstream in(chunk.substr(0, end + 1));
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

bool read_all(int fd, void* buf, size_t n, double deadline_s) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    const int left_ms = static_cast<int>((deadline_s - now_s()) * 1e3);
    if (left_ms <= 0) return false;
    pollfd pfd{fd, POLLIN, 0};
    if (poll(&pfd, 1, left_ms) <= 0) continue;
    ssize_t r = read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool write_all(int fd, const void* buf, size_t n) {
  auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace edl::bench
