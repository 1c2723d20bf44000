// Device collectives: the interface through which the GPU library (libedl_cuda, src/cuda/) plugs
// into the collective layer, so that libedl itself never links or loads CUDA (docs/gpu.md,
// "Layering").
//
//   DevicePlugin   registered once per process by libedl_cuda (set_device_plugin). For each
//                  generation Runtime::make_generation asks it for a DeviceBackend, after the
//                  generation's host communicator is connected (DeviceGenerationContext).
//   DeviceBackend  one per generation: runs the device requests the engine hands it (one call per
//                  fused group or single request, on the engine's round thread) and returns the
//                  DeviceCompletion every handle of the group waits on (collective/handle.h).
//   DeviceRequest  what the plugin's enqueue captured for one request on the caller's thread
//                  (device pointers, the caller's stream position, references to hold): opaque to
//                  the engine, which only negotiates its name and descriptor.
//
// Errors: run() throws InvalidArgument for a problem of these requests alone (they fail, the
// generation goes on) and CommError when the generation is over (the engine then fails everything,
// as for a host collective). abort() poisons the backend: the engine calls it when the generation
// breaks or stops.
//
// Thread-safety: set_device_plugin / device_plugin from any thread. A DeviceBackend's run() is
// called by one thread at a time (the engine's round holder); abort() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "collective/handle.h"
#include "edl/communicator.h"
#include "edl/export.h"
#include "edl/store.h"
#include "edl/types.h"

namespace edl::collective {

class EDL_API DeviceRequest {
 public:
  virtual ~DeviceRequest();
};

class EDL_API DeviceBackend {
 public:
  virtual ~DeviceBackend();
  // Runs one group of requests of `kind` (collective/kind.h: a device kind). Allreduce kinds: the
  // group's requests share dtype and op and are fused; other kinds: the group holds one request
  // (root: the broadcast's root).
  virtual std::shared_ptr<detail::DeviceCompletion> run(uint8_t kind, const std::vector<DeviceRequest*>& group,
                                                        DataType dtype, ReduceOp op, int root) = 0;
  // The generation is over with `error` (a CommError: the engine's failure, or AbortedError when it
  // stopped): stop device work in flight, fail what is pending with it. Idempotent; any thread.
  virtual void abort(std::exception_ptr error) = 0;
};

// What the plugin gets to build the device side of a generation.
struct DeviceGenerationContext {
  uint64_t id = 0;
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::shared_ptr<Store> store;     // the job's store
  std::string prefix;               // the generation's store prefix (unique per generation)
  std::chrono::milliseconds timeout{30000};          // EDL_TIMEOUT_MS: every collective
  std::chrono::milliseconds connect_timeout{30000};  // building the generation (init / shrink)
  std::shared_ptr<const std::atomic<bool>> cancel;   // set when the build must give up at once
  std::shared_ptr<Communicator> host;               // the generation's host communicator
  std::shared_ptr<DeviceBackend> previous;          // the current generation's backend (shrink), or null
  std::string gpu_transport = "nccl";               // EDL_GPU_TRANSPORT
  bool nccl_shrink = true;                          // EDL_NCCL_SHRINK
  size_t fusion_threshold = 64u << 20;              // EDL_FUSION_THRESHOLD
  std::string test_kill_at;                         // EDL_TEST_KILL_AT: test hook, "gpu:init" / "gpu:shrink"
};

class EDL_API DevicePlugin {
 public:
  virtual ~DevicePlugin();
  // Collective over the generation's ranks (it may use ctx.host). Throws CommError when the
  // generation cannot be built (it is then over, like a failed mesh).
  virtual std::shared_ptr<DeviceBackend> make(const DeviceGenerationContext& ctx) = 0;
};

// The process's plugin (null: no GPU library loaded; device requests then fail with InvalidArgument).
EDL_API void set_device_plugin(std::shared_ptr<DevicePlugin> plugin);
EDL_API std::shared_ptr<DevicePlugin> device_plugin();

}  // namespace edl::collective
