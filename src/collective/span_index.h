// SpanIndex: maps logical byte ranges of a list of spans (their concatenation) to pieces; used by
// the ring (ring.cc) and the shared-memory transport (shm_transport.cc).
// Thread-safety: immutable after construction; refers to the caller's span list.
#pragma once

#include <sys/uio.h>

#include <algorithm>
#include <vector>

#include "collective/tcp_communicator.h"

namespace edl::collective {

// Maps logical byte ranges of the span list to pieces.
class SpanIndex {
 public:
  explicit SpanIndex(const std::vector<Span>& spans) : spans_(spans), start_(spans.size() + 1, 0) {
    for (size_t i = 0; i < spans.size(); ++i) start_[i + 1] = start_[i] + spans[i].bytes;
  }
  template <typename Fn>
  void for_each(size_t off, size_t len, Fn&& fn) const {
    size_t i = static_cast<size_t>(std::upper_bound(start_.begin(), start_.end(), off) - start_.begin()) - 1;
    size_t rel = 0;
    while (len > 0 && i < spans_.size()) {
      size_t in = off - start_[i];
      size_t take = std::min(len, spans_[i].bytes - in);
      if (take > 0) fn(static_cast<char*>(spans_[i].data) + in, take, rel);
      rel += take;
      off += take;
      len -= take;
      ++i;
    }
  }
  int fill(size_t off, size_t len, iovec* iov, int max) const {
    int n = 0;
    for_each(off, len, [&](char* p, size_t take, size_t) {
      if (n < max) iov[n++] = iovec{p, take};
    });
    return n;
  }

 private:
  const std::vector<Span>& spans_;
  std::vector<size_t> start_;
};

}  // namespace edl::collective
