// edl-run --timeline DIR: one timeline file per worker of a real elastic job, each valid JSON with
// the worker's rendezvous, commits and allreduces; bad --timeline values exit 2 naming the flag.
#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <set>

#include "common/timeline_file.h"
#include "launcher/run_util.h"

using namespace std::chrono_literals;
using edl::test::events_named;
using edl::test::Launch;
using edl::test::metadata;
using edl::test::read_timeline;
using edl::test::run_edl;

TEST_CASE("edl-run --timeline: one timeline per worker with its generations and tensors", "[launcher][timeline]") {
  Launch l({"--min-np", "2", "--max-np", "2", "-np", "2", "--hostname", "hostA", "--timeline", "tl",
            EDL_LAUNCHER_HELPER, "elastic-train", "20", "2"});
  auto r = l.wait(60s);
  INFO(r.err);
  REQUIRE(r.code == 0);
  std::set<std::string> files;
  for (const auto& f : std::filesystem::directory_iterator(l.dir() + "/tl")) files.insert(f.path().filename());
  CHECK(files == std::set<std::string>{"worker-hostA-0-0.json", "worker-hostA-1-0.json"});
  std::set<int64_t> pids;
  for (const auto& f : files) {
    INFO(f);
    bool closed = false;
    auto all = read_timeline(l.dir() + "/tl/" + f, &closed);
    CHECK(closed);  // edl::shutdown() closed the array
    CHECK(metadata(all, "process_name")["args"]["name"].get<std::string>().find("hostA:") != std::string::npos);
    auto rv = events_named(all, "rendezvous");
    REQUIRE(rv.size() >= 1);
    CHECK(rv[0]["args"]["generation"].get<int64_t>() >= 1);
    CHECK(rv[0]["args"]["size"] == 2);
    pids.insert(rv[0]["pid"].get<int64_t>());
    int64_t last_commit = -1;
    for (const auto& c : events_named(all, "commit")) {
      CHECK(c["args"]["generation"] == rv.back()["args"]["generation"]);
      last_commit = std::max(last_commit, c["args"]["step"].get<int64_t>());
    }
    CHECK(last_commit == 20);
    size_t grads = 0;
    for (const auto& a : events_named(all, "allreduce"))
      if (a["args"].value("name", "") == "grad") {
        ++grads;
        CHECK(a["args"]["bytes"] == 4096);
        CHECK(a["args"]["fused_id"].get<int64_t>() > 0);
      }
    CHECK(grads == 20);
    CHECK(events_named(all, "state sync").size() >= 1);
    CHECK(metadata(all, "edl_timeline_stats")["args"]["dropped"] == 0);
  }
  CHECK(pids.size() == 2);  // one Chrome process per worker: the files merge cleanly
}

TEST_CASE("edl-run --timeline: static workers get one EDL_TIMELINE each, replacing an inherited one",
          "[launcher][timeline]") {
  char tmpl[] = "/tmp/edl_tl_dirXXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string dir = std::string(tmpl) + "/new";  // created by edl-run
  auto r = run_edl({"-np", "2", "--hostname", "hostB", "--timeline", dir, EDL_LAUNCHER_HELPER, "env"}, 20s,
                   {"EDL_TIMELINE=/tmp/inherited.json"});
  REQUIRE(r.code == 0);
  std::map<std::string, std::string> got;
  for (const auto& line : edl::test::lines_of(r.out)) {
    const auto p = line.find("] EDL_TIMELINE=");
    if (p != std::string::npos) got[line.substr(1, p - 1)] = line.substr(p + 15);
  }
  CHECK(got == std::map<std::string, std::string>{{"0", dir + "/worker-hostB-0.json"},
                                                  {"1", dir + "/worker-hostB-1.json"}});
  CHECK(std::filesystem::is_directory(dir));
  std::filesystem::remove_all(tmpl);
}

TEST_CASE("edl-run --timeline: bad values exit 2 naming the flag", "[launcher][timeline]") {
  char file_tmpl[] = "/tmp/edl_tl_fileXXXXXX";
  const int fd = mkstemp(file_tmpl);
  REQUIRE(fd >= 0);
  close(fd);
  for (std::string bad : {std::string(""), std::string("/nonexistent-edl/a/b"), std::string(file_tmpl)}) {
    INFO("--timeline '" << bad << "'");
    auto r = run_edl({"-np", "1", "--timeline", bad, EDL_LAUNCHER_HELPER, "env"}, 10s);
    CHECK(r.code == 2);
    CHECK(r.err.find("--timeline") != std::string::npos);
  }
  std::remove(file_tmpl);
}
