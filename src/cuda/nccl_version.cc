#include "cuda/nccl_version.h"

namespace edl::cuda {
namespace {

int code_of(int x, int y, int z) { return (x <= 2 && y <= 8) ? x * 1000 + y * 100 + z : x * 10000 + y * 100 + z; }

}  // namespace

std::string NcclVersion::text() const {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

NcclVersion nccl_version(int code) {
  NcclVersion v;
  v.code = code;
  if (code < 10000) {
    v.major = code / 1000;
    v.minor = (code % 1000) / 100;
  } else {
    v.major = code / 10000;
    v.minor = (code % 10000) / 100;
  }
  v.patch = code % 100;
  const int c = code_of(v.major, v.minor, v.patch);
  v.shrink = c >= code_of(2, 27, 3);
  v.revoke = c >= code_of(2, 28, 7);
  v.caution = c >= code_of(2, 28, 3) && c <= code_of(2, 28, 8);
  return v;
}

}  // namespace edl::cuda
