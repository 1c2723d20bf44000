#include "cuda/fusion_layout.h"

#include <algorithm>
#include <string>

#include "edl/error.h"

namespace edl::cuda {

std::vector<FusionPass> plan_fusion(const std::vector<size_t>& counts, size_t wire_size, size_t capacity_bytes,
                                    size_t align_bytes) {
  EDL_CHECK(wire_size > 0 && align_bytes > 0 && align_bytes % wire_size == 0, InvalidArgument,
            "fusion layout: alignment " + std::to_string(align_bytes) + " is not a multiple of the element size " +
                std::to_string(wire_size));
  const size_t capacity = capacity_bytes / wire_size;  // elements
  const size_t align = align_bytes / wire_size;        // elements
  EDL_CHECK(capacity >= 1, InvalidArgument,
            "fusion layout: a buffer of " + std::to_string(capacity_bytes) + " bytes holds no element of " +
                std::to_string(wire_size) + " bytes");
  std::vector<FusionPass> passes;
  FusionPass cur;
  auto close = [&] {
    if (!cur.pieces.empty()) passes.push_back(std::move(cur));
    cur = FusionPass{};
  };
  for (size_t t = 0; t < counts.size(); ++t) {
    size_t done = 0;
    while (done < counts[t]) {
      const size_t start = cur.pieces.empty() ? 0 : (cur.elements + align - 1) / align * align;
      const size_t room = start < capacity ? capacity - start : 0;
      const size_t left = counts[t] - done;
      // A tensor that does not fit starts a new pass, unless it is larger than a whole buffer:
      // then it fills passes of its own, piece by piece.
      if (room < left && !cur.pieces.empty()) {
        close();
        continue;
      }
      const size_t n = std::min(left, room);
      cur.pieces.push_back(FusionPiece{t, done, n, start});
      cur.elements = start + n;
      done += n;
      if (done < counts[t]) close();
    }
  }
  close();
  return passes;
}

}  // namespace edl::cuda
