// edl::torch without CUDA support (src/torch/device.h): built when libtorch has no CUDA or
// edl::cuda was not built; CUDA tensors are refused with a typed error naming the reason.
#include "edl/error.h"
#include "torch/device.h"

namespace edl::torch::device {

namespace {

[[noreturn]] void refuse(const std::string& what) {
  throw InvalidArgument("edl::torch: " + what +
                        " is a CUDA tensor, but this edl::torch was built without CUDA support (it needs a CUDA "
                        "libtorch and edl::cuda at build time; docs/torch.md, \"CUDA tensors\")");
}

}  // namespace

bool built() { return false; }

int cuda_device(int /*local_rank*/) {
  throw InvalidArgument(
      "edl::torch::training_device(\"cuda\"): this edl::torch was built without CUDA support (it needs a CUDA "
      "libtorch and edl::cuda at build time; docs/torch.md, \"CUDA tensors\")");
}

Handle allreduce(const ::torch::Tensor& /*t*/, const std::string& name, ReduceOp /*op*/,
                 cuda::Compression /*compression*/) {
  refuse("'" + name + "'");
}

Handle broadcast(const ::torch::Tensor& /*t*/, DataType /*dtype*/, int /*root*/, const std::string& name) {
  refuse("'" + name + "'");
}

void wait(const Handle& /*h*/, const ::torch::Tensor& /*t*/) { refuse("a tensor"); }

}  // namespace edl::torch::device
