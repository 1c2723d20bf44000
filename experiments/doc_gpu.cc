// docs/benchmarks.md, the gpu_allreduce_bench section (bench/gpu/, docs/gpu.md "Benchmark").
#include "doc_gpu.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace edl::docs {

namespace {

std::string spread(std::vector<double> v, int decimals) {
  return median_range(v, decimals, v.size() == 1 ? "row" : "rows");
}

// edl_nccl / nccl_direct time at >= 1 MiB per rank count (2+: ranks of one GPU), the fusion kernels'
// share of a device-to-device copy, and recovery by path and kill.
void targets(std::ostream& md, const Rows& rows) {
  std::vector<std::vector<std::string>> body;
  std::map<std::pair<int, double>, std::map<std::string, double>> time;
  for (const Json& r : rows)
    if (r.contains("time_us")) time[{r.value("ranks", 0), num(r, "bytes")}][r.value("impl", "")] = num(r, "time_us");
  std::map<int, std::vector<double>> ratio;
  for (const auto& [key, impls] : time)
    if (key.first >= 2 && key.second >= (1 << 20) && impls.count("edl_nccl") && impls.count("nccl_direct"))
      ratio[key.first].push_back(impls.at("edl_nccl") / impls.at("nccl_direct"));
  for (const auto& [n, v] : ratio)
    body.push_back({"edl_nccl / nccl_direct time, " + std::to_string(n) + " ranks, >= 1 MiB", "<= 1.05",
                    spread(v, 2) + " (ranks share one GPU: behaviour, not speed)"});
  std::vector<double> fusion;
  for (const Json& r : matching(rows, "impl", "fusion"))
    if (num(r, "d2d_gbps") > 0) fusion.push_back(num(r, "pack_unpack_gbps") / num(r, "d2d_gbps"));
  body.push_back({"fusion pack + unpack / device-to-device copy", ">= 0.8", spread(fusion, 2)});
  std::map<std::string, std::vector<double>> recovery;
  for (const Json& r : matching(rows, "impl", "recovery"))
    recovery[r.value("path", "?") + ", kill " + r.value("kill", "busy") +
             (r.value("shrink_requested", false) ? ", shrink asked" : ", shrink off")]
        .push_back(num(r, "recovery_ms"));
  for (const auto& [what, v] : recovery)
    body.push_back({"recovery p50 ms (" + what + ")", what.rfind("shrink", 0) == 0 ? "<= 1000" : "-", spread(v, 0)});
  md << "\nTargets of issue 23 (each from the rows above):\n\n";
  table(md, {"target", "wanted", "measured: median (range, rows)"}, body);
}

}  // namespace

void gpu_allreduce_section(std::ostream& md, const DataSet& d, Plots&) {
  const Rows& rows = d.of("gpu_allreduce_bench");
  md << "nccl-tests columns on the GPU lent to a session by the device tool (`device` names it): `nccl_direct` = "
        "`ncclAllReduce` on a communicator of its own, `edl_nccl` = `edl::cuda::allreduce` through the engine and "
        "the generation's NCCL communicator, `edl_host` = the same with `EDL_GPU_TRANSPORT=host`, the host waiting "
        "for each result; at 1 rank EDL reduces nothing (a world of one), so only 2+ ranks compare the paths, and "
        "those ranks share the one GPU (a `NCCL_HOSTID` each: NET/Socket between them, GPU time-slicing), so they "
        "show behaviour, not speed. `fusion`: pack + unpack of the ResNet-50 gradient list with EDL's kernels "
        "beside one device-to-device copy of the same bytes. `recovery`: kill -9 of one of 3 ranks (`kill` busy: "
        "mid-allreduce; idle: it had stopped submitting) to the survivors' next completed allreduce, by `path` "
        "(docs/gpu.md).\n";
  table(md, rows,
        {"impl", "ranks", "bytes", "time_us", "busbw_gbps", "wrong", "d2d_gbps", "pack_unpack_gbps", "kill", "path",
         "recovery_ms", "device", "nccl_version"});
  targets(md, rows);
}

}  // namespace edl::docs
