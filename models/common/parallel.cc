#include "models/common/parallel.h"

#include <omp.h>

namespace edl::models {

void run_chunks(int threads, int n, const std::function<void(int, int, int)>& fn) {
  if (n <= 0) return;
  int t = clamp_threads(threads, n);
  if (t == 1) {
    fn(0, 0, n);
    return;
  }
#pragma omp parallel num_threads(t)
  {
    int tid = omp_get_thread_num();
    int nt = omp_get_num_threads();
    int begin = static_cast<int>(static_cast<long>(n) * tid / nt);
    int end = static_cast<int>(static_cast<long>(n) * (tid + 1) / nt);
    if (begin < end) fn(tid, begin, end);
  }
}

}  // namespace edl::models
