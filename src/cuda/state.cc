// Device tensors in an elastic State (include/edl/cuda.h, register_tensor): a blob whose save copies
// the tensor to host memory on the caller's stream and whose load copies a snapshot back.
#include <string>

#include "cuda/cuda_util.h"
#include "edl/cuda.h"
#include "edl/error.h"

namespace edl::cuda {

void register_tensor(elastic::State& state, const std::string& name, void* data, size_t count, DataType dtype,
                     Stream stream) {
  EDL_CHECK(data != nullptr || count == 0, InvalidArgument,
            "edl::cuda::register_tensor: '" + name + "' is null but count is " + std::to_string(count));
  const size_t bytes = count * dtype_size(dtype);
  auto s = reinterpret_cast<cudaStream_t>(stream);
  state.register_blob(
      name,
      [data, bytes, s, name] {
        std::string out(bytes, '\0');
        if (bytes == 0) return out;
        check(cudaMemcpyAsync(out.data(), data, bytes, cudaMemcpyDeviceToHost, s),
              ("copying device tensor '" + name + "' to the host").c_str());
        check(cudaStreamSynchronize(s), ("copying device tensor '" + name + "' to the host").c_str());
        return out;
      },
      [data, bytes, s, name](const std::string& snapshot) {
        if (snapshot.size() != bytes)
          throw DataError("edl::cuda: the snapshot of device tensor '" + name + "' has " +
                          std::to_string(snapshot.size()) + " bytes, the tensor " + std::to_string(bytes));
        if (bytes == 0) return;
        check(cudaMemcpyAsync(data, snapshot.data(), bytes, cudaMemcpyHostToDevice, s),
              ("copying a snapshot into device tensor '" + name + "'").c_str());
        check(cudaStreamSynchronize(s), ("copying a snapshot into device tensor '" + name + "'").c_str());
      });
}

}  // namespace edl::cuda
