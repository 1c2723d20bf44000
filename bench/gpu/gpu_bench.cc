#include "gpu/gpu_bench.h"

#include <sys/stat.h>
#include <unistd.h>

#include <ctime>
#include <stdexcept>

namespace edl::bench::gpu {
namespace {

size_t parse_size(const std::string& s) {
  size_t mult = 1;
  std::string digits = s;
  if (!s.empty() && (s.back() == 'K' || s.back() == 'M' || s.back() == 'G')) {
    mult = s.back() == 'K' ? size_t{1} << 10 : s.back() == 'M' ? size_t{1} << 20 : size_t{1} << 30;
    digits.pop_back();
  }
  size_t pos = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(digits, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (digits.empty() || pos != digits.size() || v == 0)
    throw std::invalid_argument("--sizes: '" + s + "' is not a size in bytes (e.g. 4K, 1M)");
  const size_t bytes = static_cast<size_t>(v) * mult;
  if (bytes % 4 != 0) throw std::invalid_argument("--sizes: " + s + " is not a whole number of floats");
  return bytes;
}

std::string utc_now() {
  char buf[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace

BenchContext context_from(const cxxopts::ParseResult& args) {
  BenchContext c;
  for (const auto& r : split(args["ranks"].as<std::string>())) {
    int n = 0;
    try {
      n = std::stoi(r);
    } catch (const std::exception&) {
    }
    if (n < 1 || n > 8) throw std::invalid_argument("--ranks: '" + r + "' is not a rank count in [1, 8]");
    c.ranks.push_back(n);
  }
  for (const auto& s : split(args["sizes"].as<std::string>())) c.sizes.push_back(parse_size(s));
  for (const auto& i : split(args["impls"].as<std::string>())) {
    if (i != "nccl_direct" && i != "edl_nccl" && i != "edl_host" && i != "fusion" && i != "recovery")
      throw std::invalid_argument("--impls: unknown row '" + i + "'");
    c.impls.push_back(i);
  }
  c.iters = args["iters"].as<int>();
  c.warmup = args["warmup"].as<int>();
  c.kills = args["kills"].as<int>();
  c.fusion_reps = args["fusion-reps"].as<int>();
  if (c.iters < 1 || c.iters > 60) throw std::invalid_argument("--iters must be in [1, 60]");
  if (c.warmup < 0 || c.kills < 0 || c.fusion_reps < 1)
    throw std::invalid_argument("--warmup / --kills must not be negative, --fusion-reps at least 1");
  if (c.ranks.empty() || c.sizes.empty() || c.impls.empty())
    throw std::invalid_argument("--ranks, --sizes and --impls must not be empty");
  c.commit = args["commit"].as<std::string>();
  char tmpl[] = "/tmp/edl_gpu_bench_XXXXXX";
  if (!mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
  c.dir = tmpl;
  return c;
}

void mkdir_p(const std::string& dir) { ::mkdir(dir.c_str(), 0755); }

Output::Output(const BenchContext& c, const GpuInfo& g, const std::string& json)
    : c_(c),
      g_(g),
      rows_(json),
      table_({"impl", "ranks", "bytes", "time_us", "algbw_GB/s", "busbw_GB/s", "#wrong", "extra"}, 13) {}

void Output::header() const { table_.header(); }

Json Output::base(const std::string& impl, int ranks, size_t bytes, double time_us, long wrong) const {
  const double algbw = time_us > 0 ? static_cast<double>(bytes) / time_us / 1e3 : 0;
  Json row;
  row["impl"] = impl;
  row["ranks"] = ranks;
  row["bytes"] = bytes;
  row["time_us"] = time_us;
  row["algbw_gbps"] = algbw;
  row["busbw_gbps"] = ranks > 1 ? algbw * 2.0 * (ranks - 1) / ranks : 0.0;
  row["wrong"] = wrong;
  row["device"] = g_.device;
  row["driver_version"] = g_.driver;
  row["cuda_version"] = g_.cuda;
  row["nccl_version"] = g_.nccl;
  row["commit"] = c_.commit;
  row["time"] = utc_now();
  return row;
}

void Output::emit(const Json& row) {
  std::string extra;
  for (const char* k : {"kill", "path", "recovery_ms", "d2d_gbps", "pack_unpack_gbps"})
    if (row.contains(k)) extra += std::string(k) + "=" + (row[k].is_string() ? row[k].get<std::string>() : fmt(row[k].get<double>())) + " ";
  table_.row({row["impl"].get<std::string>(), std::to_string(row["ranks"].get<int>()),
              std::to_string(row["bytes"].get<size_t>()), fmt(row["time_us"].get<double>()),
              fmt(row["algbw_gbps"].get<double>()), fmt(row["busbw_gbps"].get<double>()),
              std::to_string(row["wrong"].get<long>()), extra});
  rows_.write(row);
  if (row["wrong"].get<long>() != 0) failed = true;
}

}  // namespace edl::bench::gpu
