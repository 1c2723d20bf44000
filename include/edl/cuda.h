// edl::cuda — collectives on CUDA device memory: the GPU path (docs/gpu.md).
//
// A separate library (target edl::cuda, `find_package(edl COMPONENTS cuda)`), built when the CUDA
// toolkit and NCCL are found; libedl itself never links or loads CUDA. Loading libedl_cuda (linking
// it and calling anything below) registers the GPU path with the runtime: every generation that
// edl::init() or the elastic runtime builds afterwards gets a device side — one NCCL communicator
// per generation (EDL_GPU_TRANSPORT=nccl, the default; built from the last one with ncclCommShrink
// when the generation only lost members) or the host-staged path (EDL_GPU_TRANSPORT=host: device ->
// pinned host memory -> EDL's TCP / shared-memory collectives -> device). In a world of one nothing
// is exchanged. When some rank has no usable device the GPU path is off for that generation and
// every call below throws InvalidArgument naming the rank and the reason; host collectives go on.
//
// Requests are negotiated by the background engine like host requests (matched by name; unnamed
// requests match by order), fused in a device buffer and run on the generation's own CUDA stream:
//   ordering    each operation runs after the work queued on the caller's `stream` before the call
//               (an event recorded on it at the call);
//   completion  Handle::poll() / Handle::wait() say when the result is in device memory (wait is
//               bounded by the collective deadline, EDL_TIMEOUT_MS, and rethrows the typed error);
//               stream_wait() makes a stream wait for it on the device without blocking the host
//               for the device work; completion_event() gives the event itself.
//   lifetime    the buffers must stay valid until the operation completed on the device; `hold`
//               (any shared_ptr, e.g. the tensors of a framework's caching allocator) is kept until
//               then and released by EDL afterwards.
// Every dtype and op of the host path is supported; 16-bit tensors are reduced in float32 and
// rounded once (as on the host). Errors are those of the host path (docs/errors.md): a dead peer is
// PeerLostError well inside the deadline, a hung one TimeoutError at the deadline, abort()
// AbortedError; the generation's NCCL communicator is then revoked and aborted, never reused.
//
// `Stream` is `cudaStream_t` and `Event` is `cudaEvent_t` (the same types, declared here so that
// this header needs no CUDA include): pass your cudaStream_t as it is; nullptr is the legacy
// default stream. Device pointers must be on edl::cuda::device().
//
// Thread-safety: as the host API (edl/collectives.h): any thread; a Handle may be waited on from
// any thread, several times.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "edl/collectives.h"
#include "edl/state.h"
#include "edl/types.h"

#if defined(EDL_BUILDING_CUDA_LIBRARY)
#define EDL_CUDA_API __attribute__((visibility("default")))
#else
#define EDL_CUDA_API
#endif

struct CUstream_st;
struct CUevent_st;

namespace edl::cuda {

using Stream = CUstream_st*;  // cudaStream_t
using Event = CUevent_st*;    // cudaEvent_t

// How a float32 allreduce travels: as it is, or converted to float16 / bfloat16 on the device
// before the exchange and back after it (half the bytes, ~3 / ~2 significant digits; an average is
// prescaled by 1/size so that the 16-bit sum stays in range). Ranks must agree (else MismatchError).
enum class Compression : uint8_t { kNone = 0, kFp16 = 1, kBf16 = 2 };

// Whether this process can use the GPU path (a CUDA driver and at least one visible device);
// `why` (optional) receives the reason when not. Never initialises a CUDA context.
EDL_CUDA_API bool available(std::string* why = nullptr);

// The CUDA device the GPU path uses in this process: local rank % visible devices, chosen at the
// first generation and then kept (-1 before that, or when no device is usable). Allocate your
// tensors there (cudaSetDevice(edl::cuda::device())).
EDL_CUDA_API int device();

// How the current generation's device side was built: "init" (a fresh NCCL communicator),
// "shrink" (ncclCommShrink of the last one), "host" (staged), "local" (a world of one) or
// "disabled"; `reason` (optional) receives why not a shrink, or why disabled.
EDL_CUDA_API std::string generation_mode(std::string* reason = nullptr);

// The loaded NCCL's version ("2.28.9") and whether it has ncclCommRevoke and ncclCommShrink (the
// shrink path needs both; an older NCCL rebuilds every generation from a fresh id).
EDL_CUDA_API std::string nccl_version(bool* revoke_and_shrink = nullptr);

// In-place allreduce of `count` elements at device pointer `data`. Default op: average.
EDL_CUDA_API Handle allreduce_async(void* data, size_t count, DataType dtype, Stream stream,
                                    ReduceOp op = ReduceOp::kAverage, const std::string& name = "",
                                    Compression compression = Compression::kNone, std::shared_ptr<void> hold = nullptr);
// Returns once the result is in device memory.
EDL_CUDA_API void allreduce(void* data, size_t count, DataType dtype, Stream stream, ReduceOp op = ReduceOp::kAverage,
                            const std::string& name = "", Compression compression = Compression::kNone);

// In-place broadcast of `count` elements from `root`.
EDL_CUDA_API Handle broadcast_async(void* data, size_t count, DataType dtype, int root, Stream stream,
                                    const std::string& name = "", std::shared_ptr<void> hold = nullptr);
EDL_CUDA_API void broadcast(void* data, size_t count, DataType dtype, int root, Stream stream,
                            const std::string& name = "");

// Gathers `count` elements from every rank (counts may differ) into `out`, concatenated in rank
// order. `out_capacity`: elements of room at `out`; when any rank's is smaller than the sum of the
// counts, every rank gets InvalidArgument naming it (nothing is written). `counts` (optional, host)
// receives every rank's count once the handle's host part is done (after stream_wait / wait).
EDL_CUDA_API Handle allgather_async(const void* in, size_t count, DataType dtype, void* out, size_t out_capacity,
                                    Stream stream, std::vector<size_t>* counts = nullptr, const std::string& name = "",
                                    std::shared_ptr<void> hold = nullptr);
EDL_CUDA_API void allgather(const void* in, size_t count, DataType dtype, void* out, size_t out_capacity,
                            Stream stream, std::vector<size_t>* counts = nullptr, const std::string& name = "");

// Makes `stream` wait on the device for the operation of `h` (a handle of this header's calls):
// work queued on `stream` afterwards sees the result. Blocks the host only until the operation was
// negotiated and queued on the device, not for the device work; throws the operation's error when
// it failed before that, or when its generation failed before it finished.
EDL_CUDA_API void stream_wait(const Handle& h, Stream stream);
// The event recorded after the operation on the device (same blocking as stream_wait); valid while
// `h` (or a copy) lives.
EDL_CUDA_API Event completion_event(const Handle& h);

// Registers `count` elements of device memory with an elastic State (edl/state.h): commit() copies
// them to host memory (ordered after the work queued on `stream`, then synchronised), restore() and
// sync() copy a snapshot back. The State's other items and its protocol are unchanged.
EDL_CUDA_API void register_tensor(elastic::State& state, const std::string& name, void* data, size_t count,
                                  DataType dtype, Stream stream = nullptr);

}  // namespace edl::cuda
