// The host-staged path of CudaBackend (EDL_GPU_TRANSPORT=host, docs/gpu.md): device data goes
// through the pinned staging buffer to the generation's host communicator (EDL's TCP / shared-memory
// collectives) and back. Every wait on the device is bounded (sync_stream); the host collectives
// carry their own deadline and typed errors.
#include <algorithm>
#include <cstring>

#include "cuda/cuda_backend.h"
#include "edl/error.h"

namespace edl::cuda {

void CudaBackend::staged_reduce(size_t bytes, size_t elements, DataType wire, ReduceOp op, Clock::time_point dl) {
  check(cudaMemcpyAsync(staging_, fusion_, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync to the staging buffer");
  sync_stream("copying to the staging buffer", dl);
  host_->allreduce(staging_, elements, wire, op);
  // The next use of staging_ comes after a later copy to it and its sync_stream: this copy back is
  // finished by then (stream order).
  check(cudaMemcpyAsync(fusion_, staging_, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync from the staging buffer");
}

void CudaBackend::staged_broadcast(CudaRequest& r, size_t bytes, int root, Clock::time_point dl) {
  char* data = static_cast<char*>(r.data);
  sync_stream("an earlier copy from the staging buffer", dl);  // the host writes staging_ below
  for (size_t off = 0; off < bytes; off += fusion_bytes_) {
    const size_t n = std::min(fusion_bytes_, bytes - off);
    if (rank_ == root) {
      check(cudaMemcpyAsync(staging_, data + off, n, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync");
      sync_stream("copying to the staging buffer", dl);
    }
    host_->broadcast(staging_, n, DataType::kUInt8, root);
    check(cudaMemcpyAsync(data + off, staging_, n, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
    if (off + n < bytes) sync_stream("copying from the staging buffer", dl);  // staging_ is reused
  }
}

void CudaBackend::staged_allgather(CudaRequest& r, size_t es, const std::vector<size_t>& counts, Clock::time_point dl) {
  const size_t mine = r.count * es;
  sync_stream("an earlier copy from the staging buffer", dl);  // the host writes staging_ below
  std::vector<uint8_t> local(mine);
  const char* in = static_cast<const char*>(r.in);
  for (size_t off = 0; off < mine; off += fusion_bytes_) {
    const size_t n = std::min(fusion_bytes_, mine - off);
    check(cudaMemcpyAsync(staging_, in + off, n, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync");
    sync_stream("copying to the staging buffer", dl);
    std::memcpy(local.data() + off, staging_, n);
  }
  std::vector<uint8_t> all;
  std::vector<size_t> got;
  host_->allgatherv(local.data(), mine, DataType::kUInt8, all, &got);
  size_t total = 0;
  for (size_t c : counts) total += c * es;
  if (all.size() != total)
    throw CommError("GPU path: staged allgather returned " + std::to_string(all.size()) + " bytes, expected " +
                    std::to_string(total));
  char* out = static_cast<char*>(r.out);
  for (size_t off = 0; off < total; off += fusion_bytes_) {
    const size_t n = std::min(fusion_bytes_, total - off);
    std::memcpy(staging_, all.data() + off, n);
    check(cudaMemcpyAsync(out + off, staging_, n, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
    sync_stream("copying from the staging buffer", dl);
  }
}

}  // namespace edl::cuda
