// The CUDA side of edl::torch (docs/torch.md, "CUDA tensors"): what DistributedOptimizer and the
// free functions need from EDL's GPU path (edl::cuda), for CUDA tensors. Two implementations, one
// chosen by CMake: device_cuda.cc (libtorch with CUDA and edl::cuda found: EDL_TORCH_CUDA) and
// device_none.cc (otherwise: built() is false and every other call throws InvalidArgument).
//
// Streams: every call orders its device work after the work queued on the CURRENT stream of the
// tensor's device (c10::cuda::getCurrentCUDAStream) at the call; wait() makes that stream wait for
// the operation. Lifetime: the tensor is held (a reference to its storage) until the operation has
// completed on the device, so the caching allocator cannot hand its memory to anyone else meanwhile.
//
// Thread-safety: as edl::cuda (any thread); the autograd hooks call allreduce() from libtorch's
// device thread.
#pragma once

#include <string>

#include <torch/torch.h>

#include "edl/collectives.h"
#include "edl/cuda.h"
#include "edl/types.h"

namespace edl::torch::device {

// Whether this edl::torch was built with CUDA support.
bool built();
// The CUDA device index this process trains on: edl::cuda::device() once the GPU path chose one,
// else the local rank % visible devices. InvalidArgument without CUDA support or a visible device.
int cuda_device(int local_rank);
// The in-place allreduce of `t` (a contiguous float32 CUDA tensor) over the current generation's
// GPU side (fused in device memory, NCCL or host-staged), named `name` for matching.
Handle allreduce(const ::torch::Tensor& t, const std::string& name, ReduceOp op, cuda::Compression compression);
// The in-place broadcast of `t` (contiguous CUDA tensor of `dtype`) from `root`.
Handle broadcast(const ::torch::Tensor& t, DataType dtype, int root, const std::string& name);
// Makes the current stream of t's device wait on the device for `h` (rethrows its error when it
// failed before being queued).
void wait(const Handle& h, const ::torch::Tensor& t);

}  // namespace edl::torch::device
