// Shared benchmark driver pieces: a human-readable table printer and the --json PATH writer
// (one JSON object per line, nccl-tests style: every bench row is also a correctness check).
//
// Thread-safety: a JsonRows / Table instance is used from one thread.
#pragma once

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <cxxopts.hpp>
#include <nlohmann/json.hpp>

namespace edl::bench {

using Json = nlohmann::ordered_json;  // keeps fields in the order a bench writes them

// Appends one JSON object per line to PATH; a no-op writer when PATH is empty.
class JsonRows {
 public:
  explicit JsonRows(const std::string& path);
  // Writes row as one line and flushes, so a bench killed part-way leaves complete rows.
  void write(const Json& row);
  bool enabled() const { return out_.is_open(); }

 private:
  std::ofstream out_;
};

// Column-aligned table on stdout.
class Table {
 public:
  explicit Table(std::vector<std::string> columns, int width = 14);
  void header() const;
  void row(const std::vector<std::string>& cells) const;

 private:
  std::vector<std::string> columns_;
  int width_;
};

std::string fmt(double v, int precision = 2);

// "a,b,,c" -> {"a", "b", "c"}: the comma-separated list flags of the benches.
std::vector<std::string> split(const std::string& csv);

// Parses the command line; on an unknown flag, a bad value or a stray argument prints
// "<program>: <problem> (run with --help for usage)" to stderr and exits with code 2.
cxxopts::ParseResult parse_flags(cxxopts::Options& options, int argc, char** argv);

// The whole content of a file ("" when it cannot be read).
std::string slurp(const std::string& path);
// Writes `text` to path + ".tmp" and renames it over `path` (readers never see half a file).
void write_file(const std::string& path, const std::string& text);
// Parent pid of a live process (from /proc/PID/stat); -1 when it is gone or a zombie.
int parent_of(int pid);
// CPU time (user + system) of a live process in ms, from /proc/PID/stat; -1 when it is gone.
double cpu_ms_of(int pid);
// Sockets among a live process's descriptors (/proc/PID/fd); -1 when it is gone.
int sockets_of(int pid);

// Follows a log file that other processes append to: each call returns the complete lines added
// since the previous one (a partial last line waits for its newline).
class LineTail {
 public:
  explicit LineTail(std::string path) : path_(std::move(path)) {}
  std::vector<std::string> new_lines();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  long long offset_ = 0;
};

// Monotonic seconds since an arbitrary epoch.
inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Median of a non-empty sample (copies; the input order is kept).
// Pipe I/O between a bench and its forked ranks: read exactly n bytes before deadline_s (now_s()
// clock; false on EOF, error or the deadline), write all n bytes (false on error).
bool read_all(int fd, void* buf, size_t n, double deadline_s);
bool write_all(int fd, const void* buf, size_t n);

double median(std::vector<double> v);
// q-quantile (0..1) by nearest rank of a non-empty sample.
double quantile(std::vector<double> v, double q);

}  // namespace edl::bench
