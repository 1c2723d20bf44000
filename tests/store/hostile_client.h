// Test helper: a hostile process against a store server, and a process's resident memory.
#pragma once

#include <sys/types.h>

namespace edl::test {

struct Flood {
  pid_t pid = -1;
  int rounds_fd = -1;  // one byte arrives after each completed round of 1,000 connections
};

// Forks a process that, until killed, opens rounds of 1,000 connections to 127.0.0.1:port; each
// sends a 4 GiB length prefix, 8 KiB of random bytes, an AUTH with a wrong MAC, or nothing.
Flood start_flood(int port);
// Blocks until the flood completed one more round (false if it died).
bool wait_round(const Flood& f);
// SIGKILLs and reaps the flood.
void stop_flood(Flood& f);

// VmRSS of a process in KiB (-1 if unreadable).
long rss_kib(pid_t pid);

}  // namespace edl::test
