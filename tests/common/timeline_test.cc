// The timeline (src/common/timeline.h): the file is valid trace-event JSON with the lane names,
// the bounded queue drops and counts under a flood (the count lands in the metadata), a killed
// process leaves a file that parses once "]" is appended, and bad EDL_TIMELINE values name the
// variable.
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "common/timeline.h"
#include "common/timeline_file.h"
#include "edl/edl.h"
#include "edl/error.h"

using namespace edl;
using edl::test::events_named;
using edl::test::metadata;
using edl::test::read_timeline;
using edl::test::temp_path;

namespace {

timeline::Options options(const std::string& path) {
  timeline::Options o;
  o.path = path;
  o.pid = 7;
  o.process_name = "test \"worker\"";  // quoted: must be escaped
  return o;
}

}  // namespace

TEST_CASE("timeline: events, lanes and metadata form valid trace-event JSON", "[timeline]") {
  const std::string path = temp_path("basic");
  timeline::start(options(path));
  REQUIRE(timeline::on());
  timeline::Event e(timeline::Lane::kTensor, "allreduce");
  e.span(10, 35).set_label("layer1.weight").arg("bytes", 4096).arg("fused_id", 3);
  timeline::record(e);
  { timeline::Span s(timeline::Lane::kElastic, "commit"); s.arg("generation", 2).arg("step", 17); }
  timeline::Event instant(timeline::Lane::kOptimizer, "marker");
  instant.ts_us = timeline::now_us();
  timeline::record(instant);
  timeline::stop();
  CHECK_FALSE(timeline::on());
  timeline::record(e);  // ignored: no timeline runs
  CHECK(timeline::stats().recorded == 3);
  CHECK(timeline::stats().written == 3);

  bool closed = false;
  auto all = read_timeline(path, &closed);
  CHECK(closed);
  REQUIRE(all.is_array());
  auto ar = events_named(all, "allreduce");
  REQUIRE(ar.size() == 1);
  CHECK(ar[0]["ph"] == "X");
  CHECK(ar[0]["pid"] == 7);
  CHECK(ar[0]["ts"] == 10);
  CHECK(ar[0]["dur"] == 25);
  CHECK(ar[0]["args"]["name"] == "layer1.weight");
  CHECK(ar[0]["args"]["bytes"] == 4096);
  CHECK(ar[0]["args"]["fused_id"] == 3);
  auto commit = events_named(all, "commit");
  REQUIRE(commit.size() == 1);
  CHECK(commit[0]["args"]["generation"] == 2);
  CHECK(commit[0]["args"]["step"] == 17);
  CHECK(events_named(all, "marker").at(0)["ph"] == "i");
  CHECK(metadata(all, "process_name")["args"]["name"] == "test \"worker\"");
  CHECK(metadata(all, "edl_timeline")["args"]["start_unix_us"].get<int64_t>() > 0);
  auto stats = metadata(all, "edl_timeline_stats");
  REQUIRE(stats.is_object());
  CHECK(stats["args"]["dropped"] == 0);
  // Lanes: the named ones, and one for the tensor, each named by thread_name metadata.
  std::map<int, std::string> lanes;
  for (const auto& m : all)
    if (m["name"] == "thread_name") lanes[m["tid"].get<int>()] = m["args"]["name"].get<std::string>();
  CHECK(lanes[ar[0]["tid"].get<int>()] == "layer1.weight");
  CHECK(lanes[commit[0]["tid"].get<int>()] == "elastic");
  CHECK(lanes.size() == 5);
  std::remove(path.c_str());
}

TEST_CASE("timeline: a full queue drops events and counts them in the file", "[timeline]") {
  const std::string path = temp_path("flood");
  timeline::Options o = options(path);
  o.capacity = 64;
  o.flush_period = std::chrono::milliseconds(10000);  // the writer does not drain during the flood
  timeline::start(o);
  std::vector<timeline::Event> flood(1000, timeline::Event(timeline::Lane::kCollectives, "allreduce"));
  timeline::record(flood.data(), flood.size());  // one batch: at most 64 fit
  auto st = timeline::stats();
  CHECK(st.recorded == 64);
  CHECK(st.dropped == 936);
  timeline::stop();
  auto all = read_timeline(path);
  CHECK(events_named(all, "allreduce").size() == 64);
  CHECK(metadata(all, "edl_timeline_stats")["args"]["dropped"] == 936);
  CHECK(metadata(all, "edl_timeline_stats")["args"]["recorded"] == 64);
  auto counter = events_named(all, "timeline dropped events");
  REQUIRE(counter.size() == 1);
  CHECK(counter[0]["ph"] == "C");
  CHECK(counter[0]["args"]["dropped"] == 936);
  std::remove(path.c_str());
}

TEST_CASE("timeline: many threads recording while the writer drains lose nothing below capacity", "[timeline]") {
  const std::string path = temp_path("threads");
  timeline::Options o = options(path);
  o.flush_period = std::chrono::milliseconds(1);
  timeline::start(o);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t] {
      for (int i = 0; i < 2000; ++i) {
        timeline::Event e(timeline::Lane::kTensor, "queue");
        e.span(i, i + 1).set_label("t" + std::to_string(t)).arg("i", i);
        timeline::record(e);
      }
    });
  for (auto& th : threads) th.join();
  timeline::stop();
  auto st = timeline::stats();
  CHECK(st.recorded + st.dropped == 8000);
  auto all = read_timeline(path);
  CHECK(events_named(all, "queue").size() == st.recorded);
  CHECK(st.written == st.recorded);
  std::remove(path.c_str());
}

TEST_CASE("timeline: a killed process leaves a file that parses once the array is closed", "[timeline]") {
  const std::string path = temp_path("killed");
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    timeline::Options o = options(path);
    o.flush_period = std::chrono::milliseconds(5);
    timeline::start(o);
    for (int i = 0; i < 10; ++i) {
      timeline::Event e(timeline::Lane::kElastic, "rendezvous");
      e.span(i * 10, i * 10 + 5).arg("generation", i);
      timeline::record(e);
    }
    while (timeline::stats().written < 10) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    raise(SIGKILL);  // no stop(), no atexit
    _exit(1);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  bool closed = true;
  auto all = read_timeline(path, &closed);
  CHECK_FALSE(closed);
  auto rv = events_named(all, "rendezvous");
  REQUIRE(rv.size() == 10);
  CHECK(rv[9]["args"]["generation"] == 9);
  std::remove(path.c_str());
}

TEST_CASE("timeline: bad EDL_TIMELINE values name the variable", "[timeline]") {
  SECTION("a file in a directory that does not exist") {
    timeline::Options o;
    o.path = "/nonexistent-edl-dir/t.json";
    try {
      timeline::start(o);
      FAIL("start() accepted an unwritable path");
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      CHECK(what.find("EDL_TIMELINE") != std::string::npos);
      CHECK(what.find("/nonexistent-edl-dir/t.json") != std::string::npos);
    }
    CHECK_FALSE(timeline::on());
  }
  SECTION("a directory instead of a file") {
    setenv("EDL_TIMELINE", "/tmp/", 1);
    try {
      edl::init();
      FAIL("init() accepted a directory");
    } catch (const InvalidArgument& e) {
      CHECK(std::string(e.what()).find("EDL_TIMELINE") != std::string::npos);
    }
    unsetenv("EDL_TIMELINE");
  }
  SECTION("edl::init() with an unwritable EDL_TIMELINE fails naming it") {
    setenv("EDL_TIMELINE", "/nonexistent-edl-dir/t.json", 1);
    try {
      edl::init();
      FAIL("init() accepted an unwritable EDL_TIMELINE");
    } catch (const InvalidArgument& e) {
      CHECK(std::string(e.what()).find("EDL_TIMELINE='/nonexistent-edl-dir/t.json'") != std::string::npos);
    }
    unsetenv("EDL_TIMELINE");
    CHECK_FALSE(edl::initialized());
  }
}

TEST_CASE("timeline: EDL_TIMELINE with edl::init() writes the process's file, shutdown closes it", "[timeline]") {
  const std::string path = temp_path("init");
  setenv("EDL_TIMELINE", path.c_str(), 1);
  edl::init();
  unsetenv("EDL_TIMELINE");
  CHECK(timeline::on());
  float x[4] = {1, 2, 3, 4};
  edl::allreduce(x, 4, DataType::kFloat32);  // a world of one
  edl::shutdown();
  CHECK_FALSE(timeline::on());
  bool closed = false;
  auto all = read_timeline(path, &closed);
  CHECK(closed);
  CHECK(metadata(all, "process_name")["args"]["name"].get<std::string>().find("rank 0") != std::string::npos);
  std::remove(path.c_str());
}

TEST_CASE("timeline: a forked child starts without the parent's timeline and may start its own", "[timeline]") {
  const std::string parent_path = temp_path("parent"), child_path = temp_path("child");
  timeline::start(options(parent_path));
  timeline::record(timeline::Event(timeline::Lane::kElastic, "before fork"));
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    int rc = timeline::on() ? 10 : 0;  // the parent's timeline is not the child's
    timeline::record(timeline::Event(timeline::Lane::kElastic, "child, no timeline"));  // ignored
    timeline::start(options(child_path + ".tmp"));
    timeline::record(timeline::Event(timeline::Lane::kElastic, "child event"));
    timeline::stop();
    std::rename((child_path + ".tmp").c_str(), child_path.c_str());
    _exit(rc);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  timeline::record(timeline::Event(timeline::Lane::kElastic, "after fork"));
  timeline::stop();
  auto parent = read_timeline(parent_path);
  CHECK(events_named(parent, "before fork").size() == 1);
  CHECK(events_named(parent, "after fork").size() == 1);
  CHECK(events_named(parent, "child event").empty());
  CHECK(events_named(parent, "child, no timeline").empty());
  bool closed = false;
  auto mine = read_timeline(child_path, &closed);
  CHECK(closed);
  CHECK(events_named(mine, "child event").size() == 1);
  std::remove(parent_path.c_str());
  std::remove(child_path.c_str());
}
