// Minimal leveled logging to stderr: EDL_LOG(1) << "worker joined"; (level per Config::log_level).
// Thread-safety: each message is written with one write(2), so lines from threads never interleave.
#pragma once

#include <sstream>

#include "edl/export.h"

namespace edl::log {

// Sets the process-wide level (Runtime calls this from Config); default 1.
EDL_API void set_level(int level);
EDL_API int level();  // exported (with Line) for libedl_cuda's messages

class EDL_API Line {
 public:
  explicit Line(int lvl);
  ~Line();
  template <typename T>
  Line& operator<<(const T& v) {
    os_ << v;
    return *this;
  }

 private:
  std::ostringstream os_;
};

}  // namespace edl::log

#define EDL_LOG(lvl) \
  if ((lvl) > ::edl::log::level()) { \
  } else                             \
    ::edl::log::Line(lvl)
