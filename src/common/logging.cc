#include "common/logging.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>

#include "common/log_time.h"

namespace edl::log {
namespace {
std::atomic<int> g_level{1};
const char* kNames[] = {"E", "W", "I", "D"};
}  // namespace

void set_level(int level) { g_level.store(level); }
int level() { return g_level.load(std::memory_order_relaxed); }

std::string utc_time(std::chrono::system_clock::time_point t) {
  const int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  const int64_t sec = us >= 0 ? us / 1000000 : (us - 999999) / 1000000;  // floor, also before 1970
  const time_t secs = static_cast<time_t>(sec);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];  // 27 characters; room for what the compiler cannot rule out
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<long long>(us - sec * 1000000));
  return buf;
}

Line::Line(int lvl) {
  os_ << "[edl " << kNames[lvl < 0 ? 0 : (lvl > 3 ? 3 : lvl)] << ' ' << utc_time() << " pid "
      << static_cast<int>(getpid()) << "] ";
}

Line::~Line() {
  os_ << '\n';
  std::string s = os_.str();
  ssize_t r = ::write(2, s.data(), s.size());
  (void)r;
}

}  // namespace edl::log
