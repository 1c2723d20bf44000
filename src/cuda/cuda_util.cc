#include "cuda/cuda_util.h"

#include <atomic>
#include <thread>

#include "edl/error.h"

namespace edl::cuda {
namespace {

std::atomic<int> g_device{-1};

}  // namespace

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();  // clear a sticky launch error so later checks report their own
  throw CommError(std::string("GPU path: ") + what + ": " + cudaGetErrorString(e));
}

void check_arg(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();
  throw InvalidArgument(std::string("GPU path: ") + what + ": " + cudaGetErrorString(e));
}

bool probe_device(std::string* why) {
  static const std::pair<bool, std::string> probed = [] {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return std::make_pair(false, std::string(cudaGetErrorString(e)));
    }
    if (n <= 0) return std::make_pair(false, std::string("no CUDA device is visible (CUDA_VISIBLE_DEVICES?)"));
    return std::make_pair(true, std::string());
  }();
  if (why) *why = probed.second;
  return probed.first;
}

int process_device(int local_rank) {
  int d = g_device.load();
  if (d >= 0) return d;
  int n = 0;
  check(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
  if (n <= 0) throw CommError("GPU path: no CUDA device is visible");
  const int want = local_rank % n;
  int expected = -1;
  g_device.compare_exchange_strong(expected, want);
  return g_device.load();
}

int chosen_device() { return g_device.load(); }

DevicePin::DevicePin(int device) {
  if (cudaGetDevice(&previous_) != cudaSuccess) {
    (void)cudaGetLastError();
    previous_ = -1;
  }
  if (previous_ != device) {
    check(cudaSetDevice(device), "cudaSetDevice");
    changed_ = true;
  }
}

DevicePin::~DevicePin() {
  if (changed_ && previous_ >= 0) (void)cudaSetDevice(previous_);
}

EventPool::~EventPool() {
  int previous = -1;
  (void)cudaGetDevice(&previous);
  (void)cudaSetDevice(device_);
  for (cudaEvent_t e : free_) (void)cudaEventDestroy(e);
  if (previous >= 0) (void)cudaSetDevice(previous);
  (void)cudaGetLastError();
}

cudaEvent_t EventPool::acquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_.empty()) {
      cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
  }
  DevicePin pin(device_);
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  return e;
}

void EventPool::release(cudaEvent_t e) {
  if (!e) return;
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(e);
}

void Backoff::pause() {
  ++round_;
  if (round_ < 50) {
    std::this_thread::yield();
    return;
  }
  const auto us = std::min<int64_t>(max_.count(), 10 * (round_ - 49));
  std::this_thread::sleep_for(std::chrono::microseconds(us));
}

}  // namespace edl::cuda
