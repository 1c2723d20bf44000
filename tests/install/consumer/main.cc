// Outside project built against an installed EDL: a world of size 1 without a launcher.
#include <edl/edl.h>

#include <cstdio>
#include <vector>

int main() {
  edl::init();
  std::vector<float> v = {1.f, 2.f, 3.f};
  edl::allreduce(v.data(), v.size(), edl::ReduceOp::kSum);
  bool ok = edl::size() == 1 && edl::rank() == 0 && v[0] == 1.f && v[2] == 3.f;
  edl::shutdown();
  std::printf("consumer %s (EDL %s, size 1)\n", ok ? "ok" : "FAILED", EDL_VERSION_STRING);
  return ok ? 0 : 1;
}
