#include "common/logging.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>

namespace edl::log {
namespace {
std::atomic<int> g_level{1};
const char* kNames[] = {"E", "W", "I", "D"};
}  // namespace

void set_level(int level) { g_level.store(level); }
int level() { return g_level.load(std::memory_order_relaxed); }

Line::Line(int lvl) {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                std::chrono::system_clock::now().time_since_epoch()).count();
  char buf[64];
  std::snprintf(buf, sizeof(buf), "[edl %s %lld.%06lld pid %d] ", kNames[lvl < 0 ? 0 : (lvl > 3 ? 3 : lvl)],
                static_cast<long long>(us / 1000000), static_cast<long long>(us % 1000000), static_cast<int>(getpid()));
  os_ << buf;
}

Line::~Line() {
  os_ << '\n';
  std::string s = os_.str();
  ssize_t r = ::write(2, s.data(), s.size());
  (void)r;
}

}  // namespace edl::log
