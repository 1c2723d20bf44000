// The GPU plugin (collective/device.h): builds the device side of every generation. It is
// registered with the collective layer when libedl_cuda is loaded, so a program that links edl::cuda
// gets the GPU path from its first edl::init() on; a host-only program never loads this library.
//
// make(): every rank sends its RankRecord over the generation's host communicator, all apply
// decide_plan() (generation_plan.h), then
//   kShrink  ncclCommShrink of the last generation's communicator (offered by a rank only when that
//            communicator's state is clean: NCCL 2.28 refuses one whose proxy recorded a lost peer),
//            in two halves with an exchange of one byte after each: every rank started it (a
//            refusal comes back at once), then every rank finished it (bounded by the connect
//            deadline; a rank whose wait failed writes ".../gpu/shrink-failed", which stops the
//            others' waits). Any failure: every rank aborts its part and falls back to kInit with a
//            connect deadline of its own (store key ".../gpu/nccl-id-retry");
//   kInit    rank 0's ncclGetUniqueId through the store (".../gpu/nccl-id"), non-blocking
//            ncclCommInitRankConfig bounded by the connect deadline and the build's cancel flag;
// and with NCCL a 1-element warm-up allreduce (connections are made here, not in training).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <thread>

#include "collective/device.h"
#include "common/logging.h"
#include "cuda/cuda_backend.h"
#include "cuda/generation_plan.h"
#include "cuda/nccl_comm.h"
#include "edl/error.h"

namespace edl::cuda {
namespace {

std::string to_hex(const void* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  const auto* b = static_cast<const unsigned char*>(p);
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = digits[b[i] >> 4];
    s[2 * i + 1] = digits[b[i] & 15];
  }
  return s;
}

void from_hex(const std::string& s, void* p, size_t n, const std::string& key) {
  if (s.size() != 2 * n) throw CommError("GPU path: the NCCL id under " + key + " has " + std::to_string(s.size()) + " characters");
  auto* b = static_cast<unsigned char*>(p);
  auto digit = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw CommError("GPU path: the NCCL id under " + key + " is not hexadecimal");
  };
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>(digit(s[2 * i]) << 4 | digit(s[2 * i + 1]));
}

// Every rank's bytes, allgathered over the host communicator.
std::vector<std::string> allgather_bytes(Communicator& host, const std::string& mine) {
  std::vector<uint8_t> all;
  std::vector<size_t> counts;
  host.allgatherv(mine.data(), mine.size(), DataType::kUInt8, all, &counts);
  std::vector<std::string> out;
  size_t off = 0;
  for (size_t c : counts) {
    out.emplace_back(reinterpret_cast<const char*>(all.data()) + off, c);
    off += c;
  }
  return out;
}

// Test hook (EDL_TEST_KILL_AT): die like kill -9 at a named point of the build.
void fault_point(const collective::DeviceGenerationContext& ctx, const char* point) {
  if (ctx.test_kill_at == point) ::kill(::getpid(), SIGKILL);
}

RankRecord my_record(const collective::DeviceGenerationContext& ctx, Clock::time_point deadline) {
  RankRecord r;
  r.device_ok = probe_device(&r.why);
  r.transport = ctx.gpu_transport == "host" ? Transport::kHost : Transport::kNccl;
  r.can_shrink = ctx.nccl_shrink && r.device_ok && nccl_api().can_shrink();
  if (auto* prev = dynamic_cast<CudaBackend*>(ctx.previous.get())) {
    NcclComm* p = prev->shrink_parent();
    std::string why;
    // At most 2 s for the last generation's revoke to end: a parent that is not clean by then is
    // not offered (the plan then builds a fresh communicator at once).
    if (p && r.can_shrink && !p->shrinkable(std::min(deadline, Clock::now() + std::chrono::seconds(2)), &why)) {
      EDL_LOG(2) << "GPU path: generation " << ctx.id << ": the last communicator is not shrunk: " << why;
      p = nullptr;
    }
    if (p) {
      r.parent_usable = true;
      r.parent_generation = prev->generation();
      r.parent_rank = p->rank();
      r.parent_size = p->size();
    }
  }
  return r;
}

std::unique_ptr<NcclComm> init_comm(const collective::DeviceGenerationContext& ctx, int device, const std::string& key,
                                    Clock::time_point deadline) {
  ncclUniqueId id{};
  const std::string name = "edl/g" + std::to_string(ctx.id);
  if (ctx.rank == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) throw_nccl(r, "ncclGetUniqueId", nullptr);
    ctx.store->set(key, to_hex(&id, sizeof(id)));
  } else {
    for (;;) {  // in slices, so that the build's cancel flag is seen promptly
      if (ctx.cancel && ctx.cancel->load())
        throw AbortedError("GPU path: generation " + std::to_string(ctx.id) + ": building it was given up");
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0)
        throw TimeoutError("GPU path: generation " + std::to_string(ctx.id) + ": no NCCL id from rank 0 under " + key +
                           " by the connect deadline");
      if (ctx.store->wait({key}, std::min(left, std::chrono::milliseconds(100)))) break;
    }
    from_hex(ctx.store->get_wait(key, std::chrono::milliseconds(1000)), &id, sizeof(id), key);
  }
  fault_point(ctx, "gpu:init");
  return NcclComm::init(id, ctx.rank, ctx.size, device, name, deadline, ctx.cancel.get());
}

// True when every rank's `mine` is true; else logs the first rank whose part failed.
bool all_ranks_ok(const collective::DeviceGenerationContext& ctx, bool mine, const std::string& why, const char* part) {
  const auto oks = allgather_bytes(*ctx.host, mine ? "1" : "0");
  for (size_t r = 0; r < oks.size(); ++r)
    if (oks[r] != "1") {
      EDL_LOG(1) << "GPU path: generation " << ctx.id << ": the shrink " << part << " on rank " << r
                 << (why.empty() ? "" : " (here: " + why + ")") << "; building a fresh NCCL communicator";
      return false;
    }
  return true;
}

// While a started shrink is waited for: set when a rank's shrink failed (the store key `key`, which
// that rank writes) or the build's own cancel flag is, so that no rank waits in the shrink's
// bootstrap for a member that has given up.
class ShrinkWatch {
 public:
  ShrinkWatch(const collective::DeviceGenerationContext& ctx, std::string key) : ctx_(ctx), key_(std::move(key)) {
    thread_ = std::thread([this] {
      try {
        while (!done_.load()) {
          if ((ctx_.cancel && ctx_.cancel->load()) || ctx_.store->wait({key_}, std::chrono::milliseconds(50))) {
            cancel_.store(true);
            return;
          }
        }
      } catch (const Error& e) {  // the store is gone: the shrink's own deadline still bounds the wait
        EDL_LOG(1) << "GPU path: watching " << key_ << ": " << e.what();
      }
    });
  }
  ~ShrinkWatch() {
    done_.store(true);
    thread_.join();
  }
  const std::atomic<bool>* flag() const { return &cancel_; }
  void give_up() {
    try {
      ctx_.store->set(key_, "1");
    } catch (const Error& e) {
      EDL_LOG(1) << "GPU path: writing " << key_ << ": " << e.what();
    }
  }

 private:
  const collective::DeviceGenerationContext& ctx_;
  std::string key_;
  std::atomic<bool> done_{false}, cancel_{false};
  std::thread thread_;
};

// The shrink of plan.exclude out of the previous generation's communicator, agreed by all ranks:
// null when some rank's part failed (every rank then aborts its part). Two agreements: every rank
// started it (a refusal comes back at once and leaves nothing running), then every rank finished.
std::unique_ptr<NcclComm> agreed_shrink(const collective::DeviceGenerationContext& ctx, const GenerationPlan& plan,
                                        Clock::time_point deadline) {
  auto* prev = dynamic_cast<CudaBackend*>(ctx.previous.get());
  NcclComm* parent = prev ? prev->shrink_parent() : nullptr;
  std::unique_ptr<NcclComm> child;
  std::string why;
  try {
    if (!parent) throw CommError("no parent communicator");
    fault_point(ctx, "gpu:shrink");
    child = parent->start_shrink(plan.exclude, ctx.rank, ctx.size, "edl/g" + std::to_string(ctx.id), deadline,
                                 ctx.cancel.get());
  } catch (const CommError& e) {
    why = e.what();
  }
  if (!all_ranks_ok(ctx, child != nullptr, why, "did not start")) {
    if (child) parent->cancel_shrink(std::move(child));
    return nullptr;
  }
  std::unique_ptr<NcclComm> comm;
  {
    ShrinkWatch watch(ctx, ctx.prefix + "gpu/shrink-failed");
    try {
      comm = parent->finish_shrink(std::move(child), deadline, watch.flag());
    } catch (const CommError& e) {
      why = e.what();
      watch.give_up();
    }
  }
  if (!all_ranks_ok(ctx, comm != nullptr, why, "failed")) return nullptr;  // destroying `comm` aborts it
  return comm;
}

class CudaPlugin final : public collective::DevicePlugin {
 public:
  std::shared_ptr<collective::DeviceBackend> make(const collective::DeviceGenerationContext& ctx) override {
    auto deadline = Clock::now() + ctx.connect_timeout;
    const RankRecord mine = my_record(ctx, deadline);
    const auto bytes = allgather_bytes(*ctx.host, encode_record(mine));
    std::vector<RankRecord> records;
    for (size_t r = 0; r < bytes.size(); ++r) records.push_back(decode_record(bytes[r].data(), bytes[r].size(), static_cast<int>(r)));
    GenerationPlan plan = decide_plan(records, ctx.id);
    EDL_LOG(2) << "GPU path: generation " << ctx.id << " rank " << ctx.rank << ": " << plan_mode_name(plan.mode)
               << (plan.reason.empty() ? "" : " (" + plan.reason + ")");
    if (plan.mode == PlanMode::kDisabled) {
      if (mine.device_ok) {
        EDL_LOG(1) << "GPU path: off in generation " << ctx.id << ": " << plan.reason;
      }
      return std::make_shared<CudaBackend>(ctx, plan, -1, nullptr);
    }
    const int device = process_device(ctx.local_rank);
    std::unique_ptr<NcclComm> comm;
    if (plan.mode == PlanMode::kShrink) {
      comm = agreed_shrink(ctx, plan, deadline);
      if (!comm) {  // a fresh communicator, with a connect deadline of its own (the warm-up's too)
        plan.mode = PlanMode::kInit;
        plan.reason = "the shrink failed";
        deadline = Clock::now() + ctx.connect_timeout;
        comm = init_comm(ctx, device, ctx.prefix + "gpu/nccl-id-retry", deadline);
      }
    } else if (plan.mode == PlanMode::kInit) {
      comm = init_comm(ctx, device, ctx.prefix + "gpu/nccl-id", deadline);
    }
    auto backend = std::make_shared<CudaBackend>(ctx, plan, device, std::move(comm));
    backend->warm_up(deadline);
    return backend;
  }
};

// Registration when the library is loaded (before main), so that edl::init() builds its first
// generation with the GPU path.
[[maybe_unused]] const bool g_registered = [] {
  collective::set_device_plugin(std::make_shared<CudaPlugin>());
  return true;
}();

}  // namespace

}  // namespace edl::cuda
