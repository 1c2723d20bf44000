// benchmarks_doc: writes docs/benchmarks.md, docs/experiments.md (from its template
// docs/experiments.md.in) and one gnuplot script per figure (docs/img/<name>.gp) from one committed
// data set (docs/data/: <bench>.jsonl rows, status.tsv provenance, machine.txt, series/).
//
//   benchmarks_doc --in docs/data --doc docs/benchmarks.md --img-dir docs/img
//                  [--experiments-in docs/experiments.md.in --experiments docs/experiments.md]
//
// scripts/run-benchmarks.sh runs it after the benches (then gnuplot in docs/ on every .gp);
// scripts/check-docs.sh runs it into a temporary directory and compares. The outputs depend on the
// data set only (no clock, no absolute path), so the comparison is exact. What the sections and the
// generated blocks contain: experiments/doc_benchmarks.h.
// Needs nothing but the C++ standard library and nlohmann_json (no python, no jq).
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <cxxopts.hpp>

#include "doc_benchmarks.h"
#include "doc_util.h"

namespace fs = std::filesystem;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot read '" + path + "'");
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

void write_file(const std::string& path, const std::string& text) {
  fs::path p = fs::absolute(path);
  fs::create_directories(p.parent_path());
  std::ofstream f(p);
  if (!(f << text)) throw std::runtime_error("cannot write '" + path + "'");
}

// `to` as seen from directory `from` (both made absolute; lexical, no symlinks followed).
std::string relative(const std::string& to, const fs::path& from) {
  return fs::absolute(to).lexically_normal().lexically_relative(fs::absolute(from).lexically_normal()).string();
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options opts("benchmarks_doc", "Write docs/benchmarks.md, docs/experiments.md and gnuplot scripts from bench rows");
  // clang-format off
  opts.add_options()
    ("in", "data set: <bench>.jsonl, status.tsv, machine.txt, series/", cxxopts::value<std::string>())
    ("doc", "benchmarks markdown to write", cxxopts::value<std::string>()->default_value("docs/benchmarks.md"))
    ("img-dir", "where the gnuplot scripts go (their PNGs land there when gnuplot runs in the doc's directory)",
     cxxopts::value<std::string>()->default_value("docs/img"))
    ("experiments-in", "template of the experiments document", cxxopts::value<std::string>()->default_value(""))
    ("experiments", "experiments markdown to write (with --experiments-in)", cxxopts::value<std::string>()->default_value(""))
    ("h,help", "help");
  // clang-format on
  try {
    auto a = opts.parse(argc, argv);
    if (a.count("help") || !a.count("in")) {
      std::cout << opts.help() << std::endl;
      return a.count("help") ? 0 : 2;
    }
    const std::string doc = a["doc"].as<std::string>(), img = a["img-dir"].as<std::string>();
    const fs::path doc_dir = fs::absolute(doc).parent_path();
    edl::docs::DataSet d = edl::docs::load_dataset(a["in"].as<std::string>());
    edl::docs::Plots plots(img, relative(img, doc_dir), relative(d.dir, doc_dir));
    std::ostringstream md;
    edl::docs::write_benchmarks(md, d, plots);
    write_file(doc, md.str());
    std::cout << "wrote " << doc << " and " << plots.names().size() << " gnuplot scripts in " << img << "\n";
    const std::string tin = a["experiments-in"].as<std::string>(), tout = a["experiments"].as<std::string>();
    if (!tin.empty() && !tout.empty()) {
      if (fs::absolute(tout).parent_path() != doc_dir)
        throw std::runtime_error("--experiments must be in the same directory as --doc (they share the figures)");
      std::ostringstream ex;
      edl::docs::write_experiments(ex, read_file(tin), d, plots);
      write_file(tout, ex.str());
      std::cout << "wrote " << tout << "\n";
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "benchmarks_doc: %s\n", e.what());
    return 2;
  }
  return 0;
}
