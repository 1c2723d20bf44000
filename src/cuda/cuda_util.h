// CUDA runtime helpers of libedl_cuda: error checks that throw EDL's typed errors, the process's
// device choice, a guard that restores the calling thread's current device, and a pool of events.
//
// Thread-safety: check() and probe_device() from any thread; DevicePin is per thread; EventPool is
// safe from any thread.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace edl::cuda {

// Throws CommError("<what>: <CUDA error string>") unless e is cudaSuccess.
void check(cudaError_t e, const char* what);
// Throws InvalidArgument("<what>: ...") unless e is cudaSuccess (an error of the caller's arguments).
void check_arg(cudaError_t e, const char* what);

// Whether a CUDA device is usable in this process (driver present, at least one device); the
// reason when not ("CUDA driver version is insufficient for CUDA runtime version", "no CUDA device").
// Probed once per process; never initialises a context.
bool probe_device(std::string* why);

// The device the GPU path uses in this process: chosen once, at the first generation, as
// local_rank % (visible devices), then kept (a process never changes device between generations).
int process_device(int local_rank);
// The device chosen so far (-1: none yet).
int chosen_device();

// Makes `device` current on this thread for the guard's life, then restores the previous one.
class DevicePin {
 public:
  explicit DevicePin(int device);
  ~DevicePin();
  DevicePin(const DevicePin&) = delete;
  DevicePin& operator=(const DevicePin&) = delete;

 private:
  int previous_ = -1;
  bool changed_ = false;
};

// Reusable events of one device (cudaEventDisableTiming). acquire() creates one when the pool is
// empty; release() returns it. Shared by a generation's requests and completions, which may outlive
// the generation.
class EventPool {
 public:
  explicit EventPool(int device) : device_(device) {}
  ~EventPool();
  cudaEvent_t acquire();
  void release(cudaEvent_t e);
  int device() const { return device_; }

 private:
  int device_;
  std::mutex mu_;
  std::vector<cudaEvent_t> free_;
};

// Sleeps a little between polls: spins for the first ~50 us, then backs off to `max` per poll.
class Backoff {
 public:
  explicit Backoff(std::chrono::microseconds max = std::chrono::microseconds(500)) : max_(max) {}
  void pause();

 private:
  std::chrono::microseconds max_;
  int round_ = 0;
};

}  // namespace edl::cuda
