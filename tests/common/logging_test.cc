// Log lines carry a readable UTC time (ISO 8601 with microseconds), so the logs of several hosts and
// edl-run's events line up: `[edl W 2026-11-27T13:15:24.547100Z pid 7574] message`.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "common/log_time.h"
#include "common/logging.h"

namespace {

std::chrono::system_clock::time_point at_us(int64_t us) {
  return std::chrono::system_clock::time_point(std::chrono::microseconds(us));
}

}  // namespace

TEST_CASE("utc_time: ISO 8601 in UTC with microseconds and Z", "[common][logging]") {
  CHECK(edl::log::utc_time(at_us(0)) == "1970-01-01T00:00:00.000000Z");
  CHECK(edl::log::utc_time(at_us(1795785324547100)) == "2026-11-27T13:15:24.547100Z");
  CHECK(edl::log::utc_time(at_us(951782400000001)) == "2000-02-29T00:00:00.000001Z");  // a leap day
  CHECK(edl::log::utc_time(at_us(-1)) == "1969-12-31T23:59:59.999999Z");
}

TEST_CASE("EDL_LOG lines read [edl LEVEL <UTC time> pid N] message", "[common][logging]") {
  char path[] = "/tmp/edl-log-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  const int saved = dup(2);
  dup2(fd, 2);
  EDL_LOG(0) << "an error " << 42;
  EDL_LOG(1) << "a warning";
  dup2(saved, 2);
  close(saved);
  close(fd);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::remove(path);
  const std::regex line(R"(\[edl ([EW]) (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z) pid (\d+)\] (.*))");
  std::string l;
  std::vector<std::string> lines;
  while (std::getline(text, l)) lines.push_back(l);
  REQUIRE(lines.size() == 2);
  std::smatch a, b;
  REQUIRE(std::regex_match(lines[0], a, line));
  REQUIRE(std::regex_match(lines[1], b, line));
  CHECK(a[1] == "E");
  CHECK(a[3] == std::to_string(getpid()));
  CHECK(a[4] == "an error 42");
  CHECK(b[1] == "W");
  CHECK(b[4] == "a warning");
  CHECK(a[2].str() <= b[2].str());  // same format: the strings sort by time
}
