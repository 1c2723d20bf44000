// edl::torch's CUDA side over edl::cuda (src/torch/device.h). Ordering: edl::cuda records an event
// on the stream we pass at the call (the tensor's current stream), EDL's engine stream waits on it.
// Lifetime: the tensor itself is the `hold` of the operation, released by EDL once the operation
// has completed on the device; the caching allocator only gets the block back after that, so no
// recordStream is needed (EDL's stream never touches the memory after the hold is released).
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <memory>

#include "edl/error.h"
#include "torch/device.h"

namespace edl::torch::device {

namespace {

cuda::Stream current_stream(const ::torch::Tensor& t) {
  return reinterpret_cast<cuda::Stream>(c10::cuda::getCurrentCUDAStream(t.device().index()).stream());
}

void check_tensor(const ::torch::Tensor& t, const std::string& name) {
  EDL_CHECK(t.is_cuda() && t.layout() == ::torch::kStrided && t.is_contiguous(), InvalidArgument,
            "edl::torch: '" + name + "' is not a contiguous dense CUDA tensor");
  const int chosen = cuda::device();
  EDL_CHECK(chosen < 0 || t.device().index() == chosen, InvalidArgument,
            "edl::torch: '" + name + "' is on cuda:" + std::to_string(t.device().index()) +
                " but EDL's GPU path uses cuda:" + std::to_string(chosen) +
                " in this process (allocate on edl::cuda::device())");
}

std::shared_ptr<void> hold(const ::torch::Tensor& t) { return std::make_shared<::torch::Tensor>(t); }

}  // namespace

bool built() { return true; }

int cuda_device(int local_rank) {
  const int chosen = cuda::device();
  if (chosen >= 0) return chosen;
  const int count = static_cast<int>(c10::cuda::device_count());
  std::string why;
  EDL_CHECK(count > 0 && cuda::available(&why), InvalidArgument,
            "edl::torch::training_device: no usable CUDA device" + (why.empty() ? std::string() : ": " + why));
  return local_rank % count;
}

Handle allreduce(const ::torch::Tensor& t, const std::string& name, ReduceOp op, cuda::Compression compression) {
  check_tensor(t, name);
  EDL_CHECK(t.scalar_type() == ::torch::kFloat32, InvalidArgument,
            "edl::torch: gradient '" + name + "' is not float32");
  c10::cuda::CUDAGuard guard(t.device());
  return cuda::allreduce_async(t.data_ptr(), static_cast<size_t>(t.numel()), DataType::kFloat32, current_stream(t), op,
                               name, compression, hold(t));
}

Handle broadcast(const ::torch::Tensor& t, DataType dtype, int root, const std::string& name) {
  check_tensor(t, name);
  c10::cuda::CUDAGuard guard(t.device());
  return cuda::broadcast_async(t.data_ptr(), static_cast<size_t>(t.numel()), dtype, root, current_stream(t), name,
                               hold(t));
}

void wait(const Handle& h, const ::torch::Tensor& t) {
  c10::cuda::CUDAGuard guard(t.device());
  cuda::stream_wait(h, current_stream(t));
}

}  // namespace edl::torch::device
