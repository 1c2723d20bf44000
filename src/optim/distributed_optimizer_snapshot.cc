// DistributedOptimizer::save / load: the Stateful snapshot (rescaler state, the momentum
// compensation start, each parameter's optimizer slots) on the shared codec (common/codec.h).
// Format: magic "edl-dopt-v1", u64 reserved, blob rescaler, u64 comp_t0, u64 parameter count, then
// per parameter three float vectors (u64 count + floats): slot1, slot2, comp. load() validates
// everything before it replaces anything.
#include <cstring>
#include <string>

#include "common/codec.h"
#include "optim/distributed_optimizer_impl.h"

namespace edl {
namespace {

using optim::detail::Param;

// A float vector in save() / load(): u64 count + the floats (common/codec.h).
void put_floats(codec::Writer<std::string>& w, const std::vector<float>& v) {
  w.u64(v.size());
  w.raw(v.data(), v.size() * sizeof(float));
}

void get_floats(codec::Reader& in, std::vector<float>& v, size_t expected_or_zero) {
  const uint64_t n = in.u64("slot length");
  EDL_CHECK(n == 0 || n == expected_or_zero, DataError,
            "DistributedOptimizer::load: snapshot slot has " + std::to_string(n) + " elements, parameter has " +
                std::to_string(expected_or_zero));
  std::string_view bytes = in.raw(n * sizeof(float), "slot");
  v.resize(n);
  if (n) std::memcpy(v.data(), bytes.data(), bytes.size());
}

constexpr const char* kMagic = "edl-dopt-v1";

}  // namespace

std::string DistributedOptimizer::save() {
  impl_->finalize();
  std::string out(kMagic);
  codec::Writer<std::string> w(out);
  w.u64(0);  // reserved
  w.blob(impl_->rescaler.save());
  w.u64(static_cast<uint64_t>(impl_->comp_t0));
  w.u64(impl_->params.size());
  for (const auto& p : impl_->params) {
    put_floats(w, p.slot1);
    put_floats(w, p.slot2);
    put_floats(w, p.comp);
  }
  return out;
}

void DistributedOptimizer::load(const std::string& snapshot) {
  impl_->discard();
  impl_->finalize();
  EDL_CHECK(snapshot.compare(0, std::strlen(kMagic), kMagic) == 0, DataError,
            "DistributedOptimizer::load: not an optimizer snapshot (" + std::to_string(snapshot.size()) + " bytes)");
  codec::Reader in(std::string_view(snapshot).substr(std::strlen(kMagic)), "optimizer snapshot");
  in.u64("reserved");
  std::string r(in.blob("rescaler state"));
  int64_t comp_t0 = static_cast<int64_t>(in.u64("compensation start"));
  uint64_t n = in.u64("parameter count");
  EDL_CHECK(n == impl_->params.size(), DataError,
            "DistributedOptimizer::load: snapshot has " + std::to_string(n) + " parameters, optimizer has " +
                std::to_string(impl_->params.size()));
  std::vector<Param> tmp(n);
  for (size_t i = 0; i < n; ++i) {
    const Param& p = impl_->params[i];
    get_floats(in, tmp[i].slot1, p.count);
    get_floats(in, tmp[i].slot2, p.count);
    get_floats(in, tmp[i].comp, p.count);
    EDL_CHECK(tmp[i].slot1.size() == p.slot1.size() && tmp[i].slot2.size() == p.slot2.size(), DataError,
              "DistributedOptimizer::load: snapshot slots of '" + p.name + "' do not match this optimizer's kind");
  }
  EDL_CHECK(in.done(), DataError, "DistributedOptimizer::load: trailing bytes in snapshot");
  impl_->rescaler.load(r);  // validates before anything is replaced below
  impl_->comp_t0 = comp_t0;
  for (size_t i = 0; i < n; ++i) {
    impl_->params[i].slot1 = std::move(tmp[i].slot1);
    impl_->params[i].slot2 = std::move(tmp[i].slot2);
    impl_->params[i].comp = std::move(tmp[i].comp);
  }
}

}  // namespace edl
