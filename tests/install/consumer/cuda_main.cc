// The installed edl::cuda from a user's project: the header compiles without CUDA's, the library
// loads (on a machine without a GPU too) and answers.
#include <cstdio>
#include <string>

#include <edl/cuda.h>

int main() {
  std::string why;
  const bool gpu = edl::cuda::available(&why);
  bool revoke_and_shrink = false;
  const std::string nccl = edl::cuda::nccl_version(&revoke_and_shrink);
  std::printf("cuda consumer ok: gpu %s%s, NCCL %s\n", gpu ? "yes" : "no", gpu ? "" : (" (" + why + ")").c_str(),
              nccl.c_str());
  return 0;
}
