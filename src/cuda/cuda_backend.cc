#include "cuda/cuda_backend.h"

#include <algorithm>
#include <cstring>

#include "collective/kind.h"
#include "common/logging.h"
#include "cuda/cuda_kernels.h"
#include "cuda/fusion_layout.h"
#include "edl/error.h"

namespace edl::cuda {

using collective::kDeviceAllgather;
using collective::kDeviceAllreduceBf16;
using collective::kDeviceAllreduceFp16;
using collective::kDeviceBroadcast;
using collective::kind_name;

CudaRequest::~CudaRequest() {
  if (pool) pool->release(ready);
}

namespace {

constexpr size_t kMinFusionBytes = size_t{64} << 10;

bool is_16bit(DataType t) { return t == DataType::kFloat16 || t == DataType::kBFloat16; }

}  // namespace

// How an allreduce group travels: the buffer's element type, the pack and unpack transforms and
// the op the exchange applies.
struct CudaBackend::Wire {
  DataType type;
  Transform pack, unpack;
  ReduceOp op;
};

CudaBackend::CudaBackend(const collective::DeviceGenerationContext& ctx, GenerationPlan plan, int device,
                         std::unique_ptr<NcclComm> nccl)
    : generation_(ctx.id),
      rank_(ctx.rank),
      size_(ctx.size),
      timeout_(ctx.timeout),
      host_(ctx.host),
      plan_(std::move(plan)),
      device_(device),
      nccl_(std::move(nccl)) {
  if (plan_.mode == PlanMode::kDisabled) return;
  DevicePin pin(device_);
  try {
    int lowest = 0, highest = 0;
    check(cudaDeviceGetStreamPriorityRange(&lowest, &highest), "cudaDeviceGetStreamPriorityRange");
    check(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, highest), "cudaStreamCreateWithPriority");
    if (plan_.mode != PlanMode::kLocal) {
      fusion_bytes_ = (std::max(ctx.fusion_threshold, kMinFusionBytes) + 255) / 256 * 256;
      check(cudaMalloc(&fusion_, fusion_bytes_), "cudaMalloc of the fusion buffer");
    }
    if (plan_.mode == PlanMode::kHost) check(cudaMallocHost(&staging_, fusion_bytes_), "cudaMallocHost of the staging buffer");
  } catch (...) {
    if (staging_) (void)cudaFreeHost(staging_);
    if (fusion_) (void)cudaFree(fusion_);
    if (stream_) (void)cudaStreamDestroy(stream_);
    throw;
  }
  pool_ = std::make_shared<EventPool>(device_);
  monitor_ = std::make_shared<Monitor>(generation_, device_);
  monitor_->set_hooks([this](const std::string& reason) { teardown(reason); }, [this] { return probe(); });
}

CudaBackend::~CudaBackend() {
  if (plan_.mode == PlanMode::kDisabled) return;
  if (!monitor_->poll_outstanding())
    monitor_->fail(std::make_exception_ptr(AbortedError(
        "GPU path: generation " + std::to_string(generation_) + " ended with device work in flight")));
  nccl_.reset();  // ncclCommAbort: every rank releases its communicator with abort; its kernels end
  int previous = -1;
  (void)cudaGetDevice(&previous);
  (void)cudaSetDevice(device_);
  if (stream_) (void)cudaStreamSynchronize(stream_);
  monitor_->poll_outstanding();  // every event has completed: the held references go
  monitor_->stop();              // the watchdog, the hooks (they use this object) and what it tracked
  if (staging_) (void)cudaFreeHost(staging_);
  if (fusion_) (void)cudaFree(fusion_);
  if (stream_) (void)cudaStreamDestroy(stream_);
  if (previous >= 0) (void)cudaSetDevice(previous);
  (void)cudaGetLastError();
}

std::shared_ptr<detail::DeviceCompletion> CudaBackend::run(uint8_t kind,
                                                           const std::vector<collective::DeviceRequest*>& group,
                                                           DataType dtype, ReduceOp op, int root) {
  if (plan_.mode == PlanMode::kDisabled)
    throw InvalidArgument(std::string(kind_name(kind)) + ": the GPU path is off in generation " +
                          std::to_string(generation_) + ": " + plan_.reason);
  DevicePin pin(device_);
  monitor_->throw_if_failed();
  if (auto e = probe()) {
    monitor_->fail(e);
    monitor_->rethrow();
  }
  const auto dl = Clock::now() + timeout_;
  std::vector<CudaRequest*> rs;
  std::vector<std::shared_ptr<void>> holds;
  for (collective::DeviceRequest* d : group) {
    auto* r = static_cast<CudaRequest*>(d);
    rs.push_back(r);
    if (r->hold) holds.push_back(std::move(r->hold));  // the completion alone keeps it from now on
  }
  try {
    for (CudaRequest* r : rs) check(cudaStreamWaitEvent(stream_, r->ready, 0), "cudaStreamWaitEvent");
    if (kind == kDeviceBroadcast) broadcast(*rs[0], dtype, root, dl);
    else if (kind == kDeviceAllgather) allgather(*rs[0], dtype, dl);
    else reduce_group(rs, kind, dtype, op, dl);
  } catch (const CommError&) {
    monitor_->fail(std::current_exception());
    // Work already queued may still read the tensors: their references go with a completion that
    // the watchdog releases once the stream has drained (or the generation's end aborted it).
    try {
      (void)finish(std::move(holds), "failed " + std::string(kind_name(kind)), dl);
    } catch (const std::exception&) {
    }
    monitor_->rethrow();
  }
  const std::string what = std::string(kind_name(kind)) + " of " + std::to_string(rs.size()) + " tensor" +
                           (rs.size() == 1 ? "" : "s");
  return finish(std::move(holds), what, dl);
}

void CudaBackend::abort(std::exception_ptr error) {
  if (monitor_) monitor_->fail(error);
}

void CudaBackend::reduce_group(const std::vector<CudaRequest*>& rs, uint8_t kind, DataType dt, ReduceOp op,
                               Clock::time_point dl) {
  if (plan_.mode == PlanMode::kLocal) return;  // a world of one: the result is the input
  const bool nccl = uses_nccl();
  const bool average = op == ReduceOp::kAverage;
  Wire w{dt, Transform{dt, dt, 1, 1.0f}, Transform{dt, dt, 1, 1.0f}, op};
  if (kind == kDeviceAllreduceFp16 || kind == kDeviceAllreduceBf16) {
    EDL_CHECK(dt == DataType::kFloat32, InvalidArgument,
              std::string(kind_name(kind)) + ": compression needs float32 tensors, got " + dtype_name(dt));
    w.type = kind == kDeviceAllreduceFp16 ? DataType::kFloat16 : DataType::kBFloat16;
    // The prescale keeps the 16-bit sum of an average inside the type's range.
    w.pack = Transform{dt, w.type, 1, average ? 1.0f / static_cast<float>(size_) : 1.0f};
    w.unpack = Transform{w.type, dt, 1, 1.0f};
    if (average) w.op = ReduceOp::kSum;
  } else if (nccl) {
    if (is_16bit(dt)) {  // reduced in float32 and rounded once, as the host path does
      w.type = DataType::kFloat32;
      w.pack = Transform{dt, w.type, 1, 1.0f};
    }
    w.unpack = Transform{w.type, dt, average ? size_ : 1, 1.0f};
    if (average) w.op = ReduceOp::kSum;
  }
  const size_t es = dtype_size(dt), ws = dtype_size(w.type);
  if (nccl && rs.size() == 1 && w.type == dt) {  // one tensor NCCL reduces in its own type: in place
    CudaRequest* r = rs[0];
    if (r->count == 0) return;
    nccl_->allreduce(r->data, r->data, r->count, static_cast<int>(dt), static_cast<int>(w.op), stream_, dl);
    if (w.unpack.divisor != 1) launch_batched({Segment{r->data, r->data, r->count}}, w.unpack, stream_);
    return;
  }
  std::vector<size_t> counts;
  counts.reserve(rs.size());
  for (CudaRequest* r : rs) counts.push_back(r->count);
  for (const FusionPass& pass : plan_fusion(counts, ws, fusion_bytes_)) {
    std::vector<Segment> pack, unpack;
    pack.reserve(pass.pieces.size());
    unpack.reserve(pass.pieces.size());
    for (const FusionPiece& p : pass.pieces) {
      char* user = static_cast<char*>(rs[p.tensor]->data) + p.offset * es;
      char* buf = static_cast<char*>(fusion_) + p.buffer_offset * ws;
      pack.push_back(Segment{user, buf, p.count});
      unpack.push_back(Segment{buf, user, p.count});
    }
    launch_batched(pack, w.pack, stream_);
    reduce_buffer(pass.elements, w.type, w.op, dl);
    launch_batched(unpack, w.unpack, stream_);
  }
}

void CudaBackend::reduce_buffer(size_t elements, DataType wire, ReduceOp op, Clock::time_point dl) {
  if (uses_nccl())
    nccl_->allreduce(fusion_, fusion_, elements, static_cast<int>(wire), static_cast<int>(op), stream_, dl);
  else if (plan_.mode == PlanMode::kHost)
    staged_reduce(elements * dtype_size(wire), elements, wire, op, dl);
}

void CudaBackend::broadcast(CudaRequest& r, DataType dt, int root, Clock::time_point dl) {
  const size_t bytes = r.count * dtype_size(dt);
  if (bytes == 0 || plan_.mode == PlanMode::kLocal) return;
  if (uses_nccl()) nccl_->broadcast(r.data, bytes, root, stream_, dl);
  else staged_broadcast(r, bytes, root, dl);
}

void CudaBackend::allgather(CudaRequest& r, DataType dt, Clock::time_point dl) {
  const size_t es = dtype_size(dt);
  // Every rank's count and output capacity, so that a short output fails every rank alike.
  uint64_t mine[2] = {r.count, r.out_capacity};
  std::vector<uint8_t> all;
  std::vector<size_t> lens;
  host_->allgatherv(mine, sizeof(mine), DataType::kUInt8, all, &lens);
  if (lens.size() != static_cast<size_t>(size_) || all.size() != lens.size() * sizeof(mine))
    throw CommError("GPU path: device allgather: the count exchange returned " + std::to_string(all.size()) + " bytes");
  std::vector<size_t> counts(lens.size()), bytes(lens.size()), offsets(lens.size());
  size_t total = 0;
  for (size_t p = 0; p < lens.size(); ++p) {
    uint64_t v[2];
    std::memcpy(v, all.data() + p * sizeof(mine), sizeof(mine));
    counts[p] = static_cast<size_t>(v[0]);
    offsets[p] = total * es;
    bytes[p] = counts[p] * es;
    total += counts[p];
  }
  for (size_t p = 0; p < lens.size(); ++p) {
    uint64_t v[2];
    std::memcpy(v, all.data() + p * sizeof(mine), sizeof(mine));
    if (v[1] < total)
      throw InvalidArgument("device allgather: rank " + std::to_string(p) + "'s output has room for " +
                            std::to_string(v[1]) + " elements, the gathered result has " + std::to_string(total));
  }
  if (r.counts) *r.counts = counts;
  if (total == 0) return;
  if (plan_.mode == PlanMode::kLocal) {
    check(cudaMemcpyAsync(r.out, r.in, r.count * es, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync");
  } else if (uses_nccl()) {
    const bool equal = std::all_of(counts.begin(), counts.end(), [&](size_t c) { return c == counts[0]; });
    if (equal) nccl_->allgather(r.in, r.out, bytes[0], stream_, dl);
    else nccl_->allgatherv(r.in, r.out, bytes, offsets, stream_, dl);
  } else {
    staged_allgather(r, es, counts, dl);
  }
}

std::shared_ptr<CudaRequest> CudaBackend::capture(cudaStream_t stream) {
  if (plan_.mode == PlanMode::kDisabled)
    throw InvalidArgument("edl::cuda: the GPU path is off in generation " + std::to_string(generation_) + ": " +
                          plan_.reason);
  monitor_->throw_if_failed();
  auto r = std::make_shared<CudaRequest>();
  r->pool = pool_;
  r->ready = pool_->acquire();
  check_arg(cudaEventRecord(r->ready, stream),
            ("cudaEventRecord on the caller's stream (is it a stream of device " + std::to_string(device_) + "?)").c_str());
  return r;
}

std::shared_ptr<CudaCompletion> CudaBackend::local_completion(const std::shared_ptr<CudaRequest>& r,
                                                              const std::string& what) {
  cudaEvent_t ev = r->ready;
  r->ready = nullptr;  // the completion owns it now
  std::vector<std::shared_ptr<void>> holds;
  if (r->hold) holds.push_back(std::move(r->hold));
  auto c = std::make_shared<CudaCompletion>(monitor_, pool_, ev, Clock::now() + timeout_, what, std::move(holds));
  monitor_->track(c);
  return c;
}

void CudaBackend::warm_up(Clock::time_point deadline) {
  if (!uses_nccl()) return;
  DevicePin pin(device_);
  try {
    nccl_->allreduce(fusion_, fusion_, 1, static_cast<int>(DataType::kFloat32), static_cast<int>(ReduceOp::kSum),
                     stream_, deadline);
  } catch (const CommError&) {
    monitor_->fail(std::current_exception());
    monitor_->rethrow();
  }
  sync_stream("the warm-up allreduce", deadline);
}

void CudaBackend::sync_stream(const char* what, Clock::time_point dl) {
  cudaEvent_t ev = pool_->acquire();
  struct Give {
    EventPool& pool;
    cudaEvent_t ev;
    ~Give() { pool.release(ev); }
  } give{*pool_, ev};
  check(cudaEventRecord(ev, stream_), "cudaEventRecord");
  Backoff backoff;
  auto next_probe = Clock::now();
  for (;;) {
    const cudaError_t q = cudaEventQuery(ev);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) {
      (void)cudaGetLastError();
      monitor_->fail(std::make_exception_ptr(CommError(std::string("GPU path: ") + what + ": " + cudaGetErrorString(q))));
    }
    monitor_->throw_if_failed();
    const auto now = Clock::now();
    if (now >= next_probe) {
      if (auto e = probe()) monitor_->fail(e);
      next_probe = now + std::chrono::milliseconds(1);
    }
    if (now > dl) monitor_->fail_deadline(what);
    backoff.pause();
  }
}

std::shared_ptr<CudaCompletion> CudaBackend::finish(std::vector<std::shared_ptr<void>> holds, const std::string& what,
                                                    Clock::time_point dl) {
  cudaEvent_t ev = pool_->acquire();
  const cudaError_t e = cudaEventRecord(ev, stream_);
  if (e != cudaSuccess) {
    pool_->release(ev);
    try {
      check(e, "cudaEventRecord");
    } catch (const CommError&) {
      monitor_->fail(std::current_exception());
      monitor_->rethrow();
    }
  }
  auto c = std::make_shared<CudaCompletion>(monitor_, pool_, ev, dl, what, std::move(holds));
  monitor_->track(c);
  return c;
}

void CudaBackend::teardown(const std::string& reason) {
  EDL_LOG(2) << "GPU path: generation " << generation_ << " fails: " << reason;
  if (host_) host_->abort("GPU path: " + reason);
  if (nccl_ && !nccl_->revoke(std::chrono::seconds(2))) nccl_->abort();
}

std::exception_ptr CudaBackend::probe() {
  if (host_ && host_->aborted())
    return std::make_exception_ptr(AbortedError("GPU path: the host communicator of generation " +
                                                std::to_string(generation_) + " was aborted"));
  if (nccl_) {
    const ncclResult_t st = nccl_->async_error();
    if (st != ncclSuccess && st != ncclInProgress) {
      try {
        throw_nccl(st, "NCCL communicator of generation " + std::to_string(generation_), nullptr);
      } catch (...) {
        return std::current_exception();
      }
    }
  }
  return nullptr;
}

}  // namespace edl::cuda
