#include "cuda/nccl_comm.h"

#include <dlfcn.h>

#include <algorithm>

#include "common/logging.h"
#include "cuda/cuda_util.h"
#include "edl/error.h"
#include "edl/types.h"

namespace edl::cuda {
namespace {

const char* result_name(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    default: return "unknown ncclResult_t";
  }
}

NcclApi load_api() {
  NcclApi a;
  int code = 0;
  if (ncclGetVersion(&code) != ncclSuccess) code = 0;
  a.version = nccl_version(code);
  // Revoke and Shrink by name, in the libnccl this library was loaded with: an older NCCL lacks
  // them, and a direct reference would stop libedl_cuda from loading at all.
  void* lib = nullptr;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&ncclGetVersion), &info) != 0 && info.dli_fname)
    lib = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  if (!lib) lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
  if (lib) {
    if (a.version.revoke)
      a.revoke = reinterpret_cast<ncclResult_t (*)(ncclComm_t, int)>(dlsym(lib, "ncclCommRevoke"));
    if (a.version.shrink)
      a.shrink = reinterpret_cast<ncclResult_t (*)(ncclComm_t, int*, int, ncclComm_t*, ncclConfig_t*, int)>(
          dlsym(lib, "ncclCommShrink"));
    dlclose(lib);  // only drops the reference dlopen took: libnccl stays loaded (a dependency)
  }
  if (a.version.caution) {
    EDL_LOG(1) << "GPU path: NCCL " << a.version.text()
               << " has known fault-tolerance bugs (2.28.3 - 2.28.8); use 2.28.9 or later";
  }
  return a;
}

}  // namespace

const NcclApi& nccl_api() {
  static const NcclApi api = load_api();
  return api;
}

void throw_nccl(ncclResult_t r, const std::string& what, ncclComm_t comm) {
  std::string msg = "GPU path: " + what + ": " + result_name(r) + " (" + ncclGetErrorString(r) + ")";
  const char* last = ncclGetLastError(comm);
  if (last && *last) msg += ": " + std::string(last);
  if (r == ncclRemoteError || r == ncclSystemError) throw PeerLostError(msg);
  throw CommError(msg);
}

ncclDataType_t nccl_type(int dtype) {
  switch (static_cast<DataType>(dtype)) {
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
    case DataType::kInt32: return ncclInt32;
    case DataType::kInt64: return ncclInt64;
    case DataType::kFloat16: return ncclFloat16;
    case DataType::kBFloat16: return ncclBfloat16;
    case DataType::kUInt8: return ncclUint8;
  }
  throw InvalidArgument("GPU path: no NCCL type for DataType " + std::to_string(dtype));
}

ncclRedOp_t nccl_op(int op) {
  switch (static_cast<ReduceOp>(op)) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage: return ncclSum;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kProduct: return ncclProd;
  }
  throw InvalidArgument("GPU path: no NCCL op for ReduceOp " + std::to_string(op));
}

std::unique_ptr<NcclComm> NcclComm::init(const ncclUniqueId& id, int rank, int size, int device,
                                         const std::string& name, Clock::time_point deadline,
                                         const std::atomic<bool>* cancel) {
  DevicePin pin(device);
  std::unique_ptr<NcclComm> c(new NcclComm(rank, size, device, name));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = c->name_.c_str();
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  c->comm_ = comm;
  if (r != ncclSuccess && r != ncclInProgress) {
    c->abort();
    throw_nccl(r, "ncclCommInitRankConfig of " + name, nullptr);
  }
  if (!comm) throw CommError("GPU path: ncclCommInitRankConfig of " + name + " returned no communicator");
  try {
    const ncclResult_t st = c->poll_state("NCCL communicator " + name, deadline, cancel);
    if (st != ncclSuccess) throw_nccl(st, "initialising NCCL communicator " + name, comm);
  } catch (...) {
    c->abort();
    throw;
  }
  return c;
}

bool NcclComm::shrinkable(Clock::time_point deadline, std::string* why) {
  if (!nccl_api().can_shrink()) {
    *why = "NCCL " + nccl_api().version.text() + " has no ncclCommShrink / ncclCommRevoke";
    return false;
  }
  try {
    DevicePin pin(device_);
    // A revoke still in progress (the last generation's teardown) must end first.
    const ncclResult_t st = poll_state("the last communicator before its shrink", deadline, nullptr);
    if (st == ncclSuccess) return true;
    *why = "its state is " + std::string(result_name(st)) +
           " (NCCL shrinks only a communicator without a recorded error; a member lost in the middle of a "
           "collective leaves one)";
  } catch (const Error& e) {
    *why = e.what();
  }
  return false;
}

std::unique_ptr<NcclComm> NcclComm::start_shrink(const std::vector<int>& exclude, int new_rank, int new_size,
                                                 const std::string& name, Clock::time_point deadline,
                                                 const std::atomic<bool>* cancel) {
  std::string why;  // shrinkable() also checks that the loaded NCCL has Shrink and Revoke
  if (!shrinkable(deadline, &why)) throw CommError("GPU path: " + name_ + " cannot be shrunk: " + why);
  const NcclApi& api = nccl_api();
  if (cancel && cancel->load())
    throw AbortedError("GPU path: ncclCommShrink into " + name + ": given up (the generation failed while it was being built)");
  DevicePin pin(device_);
  std::unique_ptr<NcclComm> child(new NcclComm(new_rank, new_size, device_, name));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = child->name_.c_str();
  std::vector<int> ex = exclude;  // NCCL sorts it in place
  ncclResult_t r;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A revoked communicator may be shrunk (that is what revoking keeps it for); an aborted one not.
    if (aborted_.load()) throw AbortedError("GPU path: ncclCommShrink of an aborted communicator (" + name_ + ")");
    r = api.shrink(comm_, ex.data(), static_cast<int>(ex.size()), &child->comm_, &config, NCCL_SHRINK_ABORT);
  }
  // A refusal returns before NCCL's job starts: the child was never handed out.
  if (r != ncclSuccess && r != ncclInProgress) throw_nccl(r, "ncclCommShrink into " + name, comm_);
  return child;
}

std::unique_ptr<NcclComm> NcclComm::finish_shrink(std::unique_ptr<NcclComm> child, Clock::time_point deadline,
                                                  const std::atomic<bool>* cancel) {
  const std::string what = "ncclCommShrink into " + child->name_;
  ncclResult_t st;
  try {
    DevicePin pin(device_);
    // The job runs on the parent (NCCL's ncclAsyncLaunch): the parent reports ncclInProgress until
    // it ended, then its result; the child's handle is published at the job's end.
    st = poll_state(what, deadline, cancel);
  } catch (...) {
    cancel_shrink(std::move(child));
    throw;
  }
  const ncclComm_t nc = child->handle();
  if (st != ncclSuccess || !nc) {
    cancel_shrink(std::move(child));
    throw_nccl(st != ncclSuccess ? st : ncclInternalError, what, nullptr);
  }
  const ncclResult_t cs = child->poll_state("NCCL communicator " + child->name_, deadline, cancel);
  if (cs != ncclSuccess) throw_nccl(cs, what, nc);  // destroying `child` aborts it
  return child;
}

void NcclComm::cancel_shrink(std::unique_ptr<NcclComm> child) {
  abort();  // stops and joins the shrink job before `child` (which it writes) goes away
  child.reset();
}

NcclComm::~NcclComm() { abort(); }

ncclResult_t NcclComm::poll_state(const std::string& what, Clock::time_point deadline,
                                  const std::atomic<bool>* cancel) {
  Backoff backoff(std::chrono::milliseconds(1));
  for (;;) {
    ncclResult_t st = ncclSuccess;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (aborted_.load()) throw AbortedError("GPU path: " + what + ": the communicator was aborted");
      const ncclResult_t r = ncclCommGetAsyncError(handle(), &st);
      if (r != ncclSuccess) st = r;
    }
    if (st != ncclInProgress) return st;
    if (cancel && cancel->load())
      throw AbortedError("GPU path: " + what + ": given up (the generation failed while it was being built)");
    if (Clock::now() > deadline)
      throw TimeoutError("GPU path: " + what + " still in progress at the deadline (a member died or hangs)");
    backoff.pause();
  }
}

void NcclComm::settle(ncclResult_t r, const std::string& what, Clock::time_point deadline) {
  if (r == ncclSuccess) return;
  if (r != ncclInProgress) throw_nccl(r, what, handle());
  const ncclResult_t st = poll_state(what, deadline, nullptr);
  if (st != ncclSuccess) throw_nccl(st, what, handle());
}

void NcclComm::check_usable(const char* what) const {
  if (aborted_.load() || revoked_.load())
    throw AbortedError(std::string("GPU path: ") + what + " on a revoked or aborted NCCL communicator (" + name_ + ")");
}

void NcclComm::allreduce(const void* send, void* recv, size_t count, int dtype, int op, cudaStream_t stream,
                         Clock::time_point deadline) {
  ncclResult_t r;
  {
    std::lock_guard<std::mutex> lock(mu_);
    check_usable("ncclAllReduce");
    r = ncclAllReduce(send, recv, count, nccl_type(dtype), nccl_op(op), comm_, stream);
  }
  settle(r, "ncclAllReduce", deadline);
}

void NcclComm::broadcast(void* buf, size_t bytes, int root, cudaStream_t stream, Clock::time_point deadline) {
  ncclResult_t r;
  {
    std::lock_guard<std::mutex> lock(mu_);
    check_usable("ncclBroadcast");
    r = ncclBroadcast(buf, buf, bytes, ncclUint8, root, comm_, stream);
  }
  settle(r, "ncclBroadcast", deadline);
}

void NcclComm::allgather(const void* send, void* recv, size_t bytes_each, cudaStream_t stream,
                         Clock::time_point deadline) {
  ncclResult_t r;
  {
    std::lock_guard<std::mutex> lock(mu_);
    check_usable("ncclAllGather");
    r = ncclAllGather(send, recv, bytes_each, ncclUint8, comm_, stream);
  }
  settle(r, "ncclAllGather", deadline);
}

void NcclComm::allgatherv(const void* send, void* out, const std::vector<size_t>& bytes,
                          const std::vector<size_t>& offsets, cudaStream_t stream, Clock::time_point deadline) {
  ncclResult_t r;
  {
    std::lock_guard<std::mutex> lock(mu_);
    check_usable("allgatherv (grouped ncclBroadcast)");
    r = ncclGroupStart();
    for (int p = 0; p < size_ && r == ncclSuccess; ++p) {
      if (bytes[static_cast<size_t>(p)] == 0) continue;  // every rank skips the same empty parts
      char* dst = static_cast<char*>(out) + offsets[static_cast<size_t>(p)];
      const void* src = p == rank_ ? send : dst;
      r = ncclBroadcast(src, dst, bytes[static_cast<size_t>(p)], ncclUint8, p, comm_, stream);
    }
    const ncclResult_t end = ncclGroupEnd();
    if (r == ncclSuccess) r = end;
  }
  settle(r, "allgatherv (grouped ncclBroadcast)", deadline);
}

ncclResult_t NcclComm::async_error() {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.load() || !handle()) return ncclSuccess;
  ncclResult_t st = ncclSuccess;
  const ncclResult_t r = ncclCommGetAsyncError(handle(), &st);
  return r != ncclSuccess ? r : st;
}

bool NcclComm::revoke(std::chrono::milliseconds bound) {
  const NcclApi& api = nccl_api();
  if (!api.revoke) return false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.load() || !handle()) return false;
    if (!revoked_.load()) {
      revoked_.store(true);
      DevicePin pin(device_);
      const ncclResult_t r = api.revoke(comm_, NCCL_REVOKE_DEFAULT);
      if (r != ncclSuccess && r != ncclInProgress) {
        EDL_LOG(1) << "GPU path: ncclCommRevoke of " << name_ << ": " << result_name(r);
        return false;
      }
    }
  }
  // Quiescent once the revoke job has ended: the state leaves ncclInProgress (it may then report
  // the error that caused the revoke; that does not stop a shrink or an abort).
  try {
    (void)poll_state("ncclCommRevoke of " + name_, Clock::now() + bound, nullptr);
    return true;
  } catch (const CommError&) {
    return false;
  }
}

void NcclComm::abort() {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.exchange(true)) return;
  const ncclComm_t c = handle();
  if (!c) return;
  int previous = -1;
  (void)cudaGetDevice(&previous);
  (void)cudaSetDevice(device_);
  const ncclResult_t r = ncclCommAbort(c);
  if (r != ncclSuccess) {
    EDL_LOG(1) << "GPU path: ncclCommAbort of " << name_ << ": " << result_name(r);
  }
  if (previous >= 0) (void)cudaSetDevice(previous);
  (void)cudaGetLastError();
}

}  // namespace edl::cuda
