// netns_check: builds two-worker emulated clusters (testing/netns.h) for each link and measures what
// the links really carry: TCP throughput and round-trip time between the two namespaces.
//
//   netns_check [--links unshaped,10gbit,1gbit,1gbit+0.1ms] [--mbytes 64] [--json PATH]
//
// Rows: {"link","effective_link","throughput_gbit","rtt_us","latency_emulated"}. Not root: prints
// why and exits 0 without rows.
#include <cstdio>
#include <iostream>
#include <sstream>

#include <cxxopts.hpp>

#include "common/bench_util.h"
#include "testing/netns.h"

int main(int argc, char** argv) {
  using edl::bench::fmt;
  cxxopts::Options opts("netns_check", "Measure emulated cluster links between network namespaces");
  opts.add_options()
    ("links", "links to build (unshaped = veth without tc)",
     cxxopts::value<std::string>()->default_value("unshaped,10gbit,1gbit,1gbit+0.1ms"))
    ("mbytes", "MiB per throughput probe", cxxopts::value<int>()->default_value("64"))
    ("json", "append JSON rows here", cxxopts::value<std::string>()->default_value(""))
    ("h,help", "help");
  try {
    auto a = opts.parse(argc, argv);
    if (a.count("help")) {
      std::cout << opts.help() << std::endl;
      return 0;
    }
    std::string why = edl::testing::NetnsCluster::unsupported_reason();
    if (!why.empty()) {
      std::cout << "netns_check: skipped: " << why << "\n";
      return 0;
    }
    edl::testing::NetnsCluster::remove_stale();
    edl::bench::JsonRows json(a["json"].as<std::string>());
    edl::bench::Table t({"link", "effective", "Gbit/s", "rtt_us"}, 14);
    t.header();
    std::stringstream ss(a["links"].as<std::string>());
    std::string name;
    while (std::getline(ss, name, ',')) {
      edl::testing::LinkSpec link = name == "unshaped" ? edl::testing::LinkSpec{"unshaped"} : edl::testing::parse_link(name);
      edl::testing::NetnsCluster c(2, link);
      size_t bytes = static_cast<size_t>(a["mbytes"].as<int>()) << 20;
      edl::testing::probe_throughput_gbit(c, 0, 1, bytes / 8);  // warm-up
      double gbit = edl::testing::probe_throughput_gbit(c, 0, 1, bytes);
      double rtt = edl::testing::probe_rtt_us(c, 0, 1, 200);
      t.row({name, c.effective_label(), fmt(gbit, 3), fmt(rtt, 1)});
      json.write({{"link", name}, {"effective_link", c.effective_label()}, {"throughput_gbit", gbit},
                  {"rtt_us", rtt}, {"latency_emulated", c.latency_emulated()}});
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "netns_check: %s\n", e.what());
    return 2;
  }
  return 0;
}
