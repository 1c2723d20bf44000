// edl::torch broadcasts and elastic-state registration: module tensors as raw EDL tensors, the torch
// optimizer's state as torch-serialized bytes, with a layout check (names, shapes, dtypes) before
// any broadcast so that differing modules fail with MismatchError instead of hanging. CUDA tensors
// and the state of an optimizer over them are staged blobs (elastic/state_staged.h): a commit copies
// them on the device, host bytes only for a checkpoint file or another member.
#include <sstream>
#include <type_traits>

#include "edl/collectives.h"
#include "edl/edl.h"
#include "edl/error.h"
#include "edl/torch.h"
#include "elastic/state_staged.h"
#include "torch/device.h"

namespace edl::torch {

namespace {

struct Entry {
  std::string name;
  ::torch::Tensor tensor;
  DataType dtype;
};

DataType dtype_of(const std::string& name, const ::torch::Tensor& t) {
  switch (t.scalar_type()) {
    case ::torch::kFloat32: return DataType::kFloat32;
    case ::torch::kFloat64: return DataType::kFloat64;
    case ::torch::kInt64: return DataType::kInt64;
    case ::torch::kInt32: return DataType::kInt32;
    case ::torch::kFloat16: return DataType::kFloat16;
    case ::torch::kBFloat16: return DataType::kBFloat16;
    case ::torch::kUInt8: return DataType::kUInt8;
    default: break;
  }
  throw InvalidArgument("edl::torch: tensor '" + name + "' has an unsupported dtype (" +
                        std::string(c10::toString(t.scalar_type())) + ")");
}

// Parameters ("param.<name>") then buffers ("buffer.<name>"), in the module's registration order.
std::vector<Entry> entries_of(::torch::nn::Module& module) {
  std::vector<Entry> out;
  auto add = [&](const std::string& name, const ::torch::Tensor& t) {
    if (!t.defined()) return;
    EDL_CHECK((t.is_cpu() || t.is_cuda()) && t.layout() == ::torch::kStrided && t.is_contiguous(), InvalidArgument,
              "edl::torch: tensor '" + name + "' is not a contiguous dense CPU or CUDA tensor");
    out.push_back(Entry{name, t, dtype_of(name, t)});
  };
  for (const auto& item : module.named_parameters(true)) add("param." + item.key(), item.value());
  for (const auto& item : module.named_buffers(true)) add("buffer." + item.key(), item.value());
  return out;
}

// The group the free functions run on: an explicit Communicator, else the global world (a world of
// one when edl::init() was not called).
struct Group {
  std::shared_ptr<Communicator> comm;
  int size() const { return comm ? comm->size() : (edl::initialized() ? edl::size() : 1); }
  int rank() const { return comm ? comm->rank() : (edl::initialized() ? edl::rank() : 0); }
  void broadcast(void* data, size_t n, DataType t, int root, const std::string& name) const {
    if (comm) {
      comm->broadcast(data, n, t, root);
    } else {
      edl::broadcast(data, n, t, root, name);
    }
  }
  void allgather(const void* in, size_t n, DataType t, std::vector<uint8_t>& out, const std::string& name) const {
    if (comm) {
      comm->allgatherv(in, n, t, out);
    } else {
      edl::allgather(in, n, t, out, nullptr, name);
    }
  }
};

uint64_t fnv(uint64_t h, const std::string& s) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Every rank must describe the same tensors: one allgather of (count, hash); MismatchError otherwise.
void check_layout(const Group& g, const std::string& what, const std::vector<std::string>& items) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& s : items) h = fnv(fnv(h, s), ";");
  const int64_t mine[2] = {static_cast<int64_t>(items.size()), static_cast<int64_t>(h)};
  std::vector<uint8_t> all;
  g.allgather(mine, 2, DataType::kInt64, all, "edl.torch.layout." + what);
  const size_t n = all.size() / (2 * sizeof(int64_t));
  std::vector<int64_t> v(2 * n);
  std::memcpy(v.data(), all.data(), v.size() * sizeof(int64_t));
  for (size_t r = 0; r < n; ++r) {
    if (v[2 * r] == v[0] && v[2 * r + 1] == v[1]) continue;
    std::string mine_list;
    for (const auto& s : items) mine_list += (mine_list.empty() ? "" : ", ") + s;
    if (mine_list.size() > 300) mine_list = mine_list.substr(0, 300) + "...";
    throw MismatchError("edl::torch::" + what + ": ranks have different tensors: rank 0 has " + std::to_string(v[0]) +
                        ", rank " + std::to_string(r) + " has " + std::to_string(v[2 * r]) +
                        (v[2 * r] == v[0] ? " (same count, different names, shapes or dtypes)" : "") +
                        "; this rank (" + std::to_string(g.rank()) + ") has [" + mine_list + "]");
  }
}

std::string describe(const Entry& e) {
  std::string s = e.name + ":" + dtype_name(e.dtype) + "[";
  for (int64_t d = 0; d < e.tensor.dim(); ++d) s += (d ? "," : "") + std::to_string(e.tensor.size(d));
  return s + "]";
}

}  // namespace

void broadcast_parameters(::torch::nn::Module& module, int root, std::shared_ptr<Communicator> comm) {
  Group g{std::move(comm)};
  if (g.size() < 2) return;
  EDL_CHECK(root >= 0 && root < g.size(), InvalidArgument,
            "edl::torch::broadcast_parameters: root " + std::to_string(root) + " out of range (size " +
                std::to_string(g.size()) + ")");
  auto entries = entries_of(module);
  std::vector<std::string> items;
  for (const auto& e : entries) items.push_back(describe(e));
  check_layout(g, "broadcast_parameters", items);
  ::torch::NoGradGuard no_grad;
  if (g.comm) {  // host collectives: CUDA tensors are staged through host memory
    for (auto& e : entries) {
      ::torch::Tensor host = e.tensor.is_cuda() ? e.tensor.to(::torch::kCPU) : e.tensor;
      g.broadcast(host.data_ptr(), host.numel(), e.dtype, root, "");
      if (e.tensor.is_cuda()) e.tensor.copy_(host);
    }
    return;
  }
  // The engine fuses them (CUDA tensors in device memory); matched by name.
  std::vector<Handle> handles;
  for (auto& e : entries) {
    const std::string name = "edl.torch.bcast." + e.name;
    handles.push_back(e.tensor.is_cuda() ? device::broadcast(e.tensor, e.dtype, root, name)
                                         : edl::broadcast_async(e.tensor.data_ptr(),
                                                                static_cast<size_t>(e.tensor.numel()), e.dtype, root,
                                                                name));
  }
  std::exception_ptr error;
  for (size_t i = 0; i < handles.size(); ++i) {
    try {
      if (entries[i].tensor.is_cuda()) {
        device::wait(handles[i], entries[i].tensor);  // the current stream waits on the device
      } else {
        handles[i].wait();
      }
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

// libtorch 1.13's Optimizer::save/load carry the per-parameter state but load() leaves the param
// groups' options (learning rate, momentum, betas, ...) alone: they are written next to it.
std::string save_optimizer_state(::torch::optim::Optimizer& optimizer) {
  ::torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  const auto& groups = optimizer.param_groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    ::torch::serialize::OutputArchive options(archive.compilation_unit());
    groups[i].options().serialize(options);
    archive.write("edl_group_options_" + std::to_string(i), options);
  }
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void load_optimizer_state(::torch::optim::Optimizer& optimizer, const std::string& bytes) {
  try {
    ::torch::serialize::InputArchive archive;
    std::istringstream in(bytes);
    archive.load_from(in);
    optimizer.load(archive);
    auto& groups = optimizer.param_groups();
    for (size_t i = 0; i < groups.size(); ++i) {
      ::torch::serialize::InputArchive options;
      if (archive.try_read("edl_group_options_" + std::to_string(i), options)) groups[i].options().serialize(options);
    }
  } catch (const c10::Error& e) {
    throw DataError("edl::torch: optimizer state (" + std::to_string(bytes.size()) +
                    " bytes) does not load into this optimizer: " + e.what_without_backtrace());
  }
}

void broadcast_optimizer_state(::torch::optim::Optimizer& optimizer, int root, std::shared_ptr<Communicator> comm) {
  Group g{std::move(comm)};
  if (g.size() < 2) return;
  EDL_CHECK(root >= 0 && root < g.size(), InvalidArgument,
            "edl::torch::broadcast_optimizer_state: root " + std::to_string(root) + " out of range");
  std::vector<std::string> items;
  for (const auto& group : optimizer.param_groups()) {
    items.push_back("group");
    for (const auto& p : group.params()) {
      std::string s = std::string(c10::toString(p.scalar_type())) + "[";
      for (int64_t d = 0; d < p.dim(); ++d) s += (d ? "," : "") + std::to_string(p.size(d));
      items.push_back(s + "]");
    }
  }
  check_layout(g, "broadcast_optimizer_state", items);
  std::string bytes;
  if (g.rank() == root) bytes = save_optimizer_state(optimizer);
  int64_t n = static_cast<int64_t>(bytes.size());
  g.broadcast(&n, 1, DataType::kInt64, root, "edl.torch.optstate.size");
  bytes.resize(static_cast<size_t>(n));
  g.broadcast(bytes.data(), bytes.size(), DataType::kUInt8, root, "edl.torch.optstate.bytes");
  if (g.rank() != root) load_optimizer_state(optimizer, bytes);
}

namespace {

std::string host_bytes(const ::torch::Tensor& t) {
  const ::torch::Tensor h = t.to(::torch::kCPU).contiguous();
  return std::string(static_cast<const char*>(h.data_ptr()), h.nbytes());
}

// A CUDA tensor: commit = a device-to-device copy into a tensor of its own, on the current stream
// (after the work queued there; nothing waits for it); restore = the copy back, on the current
// stream. Host bytes (the raw elements, as register_tensor's) only when the commit leaves.
void register_device_tensor(elastic::State& state, const std::string& name, const ::torch::Tensor& t) {
  auto copy = std::make_shared<::torch::Tensor>();
  elastic::StagedBlob b;
  b.capture = [t, copy] {
    ::torch::NoGradGuard no_grad;
    if (!copy->defined()) *copy = ::torch::empty_like(t);
    copy->copy_(t);
  };
  b.captured = [copy] { return host_bytes(*copy); };
  b.restore_captured = [t, copy] {
    ::torch::NoGradGuard no_grad;
    t.copy_(*copy);
  };
  b.load = [t, name](const std::string& bytes) {
    EDL_CHECK(bytes.size() == t.nbytes(), DataError,
              "edl::torch: the snapshot of CUDA tensor '" + name + "' has " + std::to_string(bytes.size()) +
                  " bytes, the tensor " + std::to_string(t.nbytes()));
    ::torch::NoGradGuard no_grad;  // a blocking copy from pageable memory: `bytes` outlives it
    t.copy_(::torch::from_blob(const_cast<char*>(bytes.data()), t.sizes(), t.options().device(::torch::kCPU)));
  };
  elastic::register_staged_blob(state, name, std::move(b));
}

::torch::Tensor dup(const ::torch::Tensor& t) { return t.defined() ? t.clone() : t; }

// A deep copy of one parameter's optimizer state (its tensors cloned on their device), for the
// optimizers of libtorch whose state is known; nullptr for any other.
std::unique_ptr<::torch::optim::OptimizerParamState> deep_copy(const ::torch::optim::OptimizerParamState& s) {
  namespace o = ::torch::optim;
  auto out = s.clone();  // the fields; its tensors are still shared
  if (auto* p = dynamic_cast<o::SGDParamState*>(out.get())) {
    p->momentum_buffer(dup(p->momentum_buffer()));
  } else if (auto* a = dynamic_cast<o::AdamParamState*>(out.get())) {
    a->exp_avg(dup(a->exp_avg())).exp_avg_sq(dup(a->exp_avg_sq())).max_exp_avg_sq(dup(a->max_exp_avg_sq()));
  } else if (auto* w = dynamic_cast<o::AdamWParamState*>(out.get())) {
    w->exp_avg(dup(w->exp_avg())).exp_avg_sq(dup(w->exp_avg_sq())).max_exp_avg_sq(dup(w->max_exp_avg_sq()));
  } else if (auto* g = dynamic_cast<o::AdagradParamState*>(out.get())) {
    g->sum(dup(g->sum()));
  } else if (auto* r = dynamic_cast<o::RMSpropParamState*>(out.get())) {
    r->square_avg(dup(r->square_avg())).momentum_buffer(dup(r->momentum_buffer())).grad_avg(dup(r->grad_avg()));
  } else {
    return nullptr;
  }
  return out;
}

bool known_optimizer(::torch::optim::Optimizer& opt) {
  namespace o = ::torch::optim;
  return dynamic_cast<o::SGD*>(&opt) || dynamic_cast<o::Adam*>(&opt) || dynamic_cast<o::AdamW*>(&opt) ||
         dynamic_cast<o::Adagrad*>(&opt) || dynamic_cast<o::RMSprop*>(&opt);
}

// The state of an optimizer over CUDA parameters, kept on the device at commit: every
// per-parameter state deep-copied and the param groups' options (LR, momentum, ...) cloned.
struct OptimizerCopy {
  using StateMap = std::remove_reference_t<decltype(std::declval<::torch::optim::Optimizer&>().state())>;
  ::torch::optim::Optimizer* opt;
  StateMap state;
  std::vector<std::unique_ptr<::torch::optim::OptimizerOptions>> options;

  static void copy_state(const StateMap& from, StateMap& to) {
    to.clear();
    for (const auto& kv : from) {
      auto c = deep_copy(*kv.second);
      EDL_CHECK(c != nullptr, InvalidArgument, "edl::torch: an optimizer state of an unknown type (register_state)");
      to.emplace(kv.first, std::move(c));
    }
  }
  void capture() {
    copy_state(opt->state(), state);
    options.clear();
    for (const auto& g : opt->param_groups()) options.push_back(g.options().clone());
  }
  void restore() {
    copy_state(state, opt->state());  // a copy again: the optimizer updates its state in place
    auto& groups = opt->param_groups();
    for (size_t i = 0; i < groups.size() && i < options.size(); ++i) groups[i].set_options(options[i]->clone());
  }
  // The copy's bytes (save_optimizer_state's format): swapped in for the serialization.
  std::string bytes() {
    auto& groups = opt->param_groups();
    std::swap(state, opt->state());
    for (size_t i = 0; i < groups.size() && i < options.size(); ++i) {
      auto live = groups[i].options().clone();
      groups[i].set_options(std::move(options[i]));
      options[i] = std::move(live);
    }
    std::string out;
    std::exception_ptr error;
    try {
      out = save_optimizer_state(*opt);
    } catch (...) {
      error = std::current_exception();
    }
    std::swap(state, opt->state());
    for (size_t i = 0; i < groups.size() && i < options.size(); ++i) {
      auto copy = groups[i].options().clone();
      groups[i].set_options(std::move(options[i]));
      options[i] = std::move(copy);
    }
    if (error) std::rethrow_exception(error);
    return out;
  }
};

bool any_cuda(const ::torch::optim::Optimizer& opt) {
  for (const auto& p : opt.parameters())
    if (p.is_cuda()) return true;
  return false;
}

}  // namespace

void register_state(elastic::State& state, ::torch::nn::Module& module, ::torch::optim::Optimizer* optimizer,
                    const std::string& prefix) {
  for (auto& e : entries_of(module)) {
    if (e.tensor.is_cuda()) {
      register_device_tensor(state, prefix + "." + e.name, e.tensor);
    } else {
      state.register_tensor(prefix + "." + e.name, e.tensor.data_ptr(), static_cast<size_t>(e.tensor.numel()),
                            e.dtype);
    }
  }
  if (optimizer == nullptr) return;
  if (any_cuda(*optimizer) && known_optimizer(*optimizer)) {
    auto copy = std::make_shared<OptimizerCopy>();
    copy->opt = optimizer;
    elastic::StagedBlob b;
    b.capture = [copy] { copy->capture(); };
    b.captured = [copy] { return copy->bytes(); };
    b.restore_captured = [copy] { copy->restore(); };
    b.load = [optimizer](const std::string& bytes) { load_optimizer_state(*optimizer, bytes); };
    elastic::register_staged_blob(state, prefix + ".optimizer", std::move(b));
    return;
  }
  state.register_blob(
      prefix + ".optimizer", [optimizer] { return save_optimizer_state(*optimizer); },
      [optimizer](const std::string& bytes) { load_optimizer_state(*optimizer, bytes); });
}

::torch::Device training_device(const std::string& kind) {
  if (kind == "cpu") return ::torch::Device(::torch::kCPU);
  EDL_CHECK(kind == "cuda", InvalidArgument, "edl::torch::training_device: unknown device '" + kind + "' (cpu or cuda)");
  const int local_rank = edl::initialized() ? edl::local_rank() : 0;
  return ::torch::Device(::torch::kCUDA, static_cast<c10::DeviceIndex>(device::cuda_device(local_rank)));
}

void register_state(elastic::State& state, ::torch::nn::Module& module, DistributedOptimizer& opt,
                    const std::string& prefix) {
  register_state(state, module, &opt.optimizer(), prefix);
  state.register_component(prefix + ".edl", &opt);
}

}  // namespace edl::torch
