// Intra-op parallelism for the reference models: a batch is split into contiguous chunks of images,
// one chunk per thread. With threads == 1 nothing is spawned: the work runs on the calling thread, so
// "1 thread" is truly one thread. Otherwise a process-wide pool of threads - 1 workers runs the other
// chunks while the caller runs chunk 0; idle workers spin briefly, then block (on a shared
// 2-core machine a long spin-wait, OpenMP's default, costs more than it saves).
//
// Thread-safety: run_chunks() may be called from any thread; regions from different callers are
// serialised. The callback runs concurrently on up to `threads` threads with disjoint [begin, end)
// ranges and distinct tids in [0, threads). An exception thrown by a chunk is rethrown to the caller.
#pragma once

#include <algorithm>
#include <functional>

namespace edl::models {

// Calls fn(tid, begin, end) for each of min(threads, n) contiguous, near-equal chunks of [0, n).
void run_chunks(int threads, int n, const std::function<void(int tid, int begin, int end)>& fn);

// Called by a producer layer on its worker thread `tid` right after it wrote images [begin, end) of
// its output, while they are still in cache: lets a consumer (batch norm) fuse its reductions into
// the producer's pass instead of reading the tensor again. Empty = no hook.
using BlockHook = std::function<void(int tid, int begin, int end)>;

// Maximum thread count run_chunks() will use for `threads` (>= 1).
inline int clamp_threads(int threads, int n) { return std::max(1, std::min(threads, n)); }

}  // namespace edl::models
