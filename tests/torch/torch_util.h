// Shared helpers of the edl::torch tests: a tiny MLP, deterministic data, ranks as threads with one
// Communicator each over a memory store, and parameter comparison.
#pragma once

#include <chrono>
#include <exception>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <torch/torch.h>
// Debian's libtorch pulls in glog, whose CHECK would replace Catch's: include this header before
// <catch2/catch.hpp> so that Catch's CHECK is the one defined.
#undef CHECK

#include "edl/communicator.h"
#include "edl/store.h"

// Outside namespace edl: TORCH_MODULE names torch::nn unqualified, which edl::torch would shadow.
namespace torch_test {

struct MlpImpl : ::torch::nn::Module {
  explicit MlpImpl(int in = 6, int hidden = 12, int out = 3)
      : fc1(register_module("fc1", ::torch::nn::Linear(in, hidden))),
        fc2(register_module("fc2", ::torch::nn::Linear(hidden, out))) {}
  ::torch::Tensor forward(const ::torch::Tensor& x) { return fc2(::torch::tanh(fc1(x))); }
  ::torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Mlp);

struct Data {
  ::torch::Tensor x, y;  // [n, in], [n, out]
};

inline Data make_data(int64_t n, int in = 6, int out = 3, uint64_t seed = 7) {
  ::torch::manual_seed(seed);
  Data d;
  d.x = ::torch::randn({n, in});
  d.y = ::torch::randn({n, out});
  return d;
}

// Copies `from`'s parameters and buffers into `to` (same architecture).
inline void copy_module(const ::torch::nn::Module& from, ::torch::nn::Module& to) {
  ::torch::NoGradGuard no_grad;
  auto src = from.named_parameters(true);
  for (auto& item : to.named_parameters(true)) item.value().copy_(src[item.key()]);
  auto bsrc = from.named_buffers(true);
  for (auto& item : to.named_buffers(true)) item.value().copy_(bsrc[item.key()]);
}

// Mean squared error of `net` on rows [begin, begin + n).
inline ::torch::Tensor loss_on(Mlp& net, const Data& d, int64_t begin, int64_t n) {
  auto x = d.x.narrow(0, begin, n), y = d.y.narrow(0, begin, n);
  return ::torch::mse_loss(net->forward(x), y);
}

// All parameters flattened into one vector (for bitwise and tolerance comparisons).
inline std::vector<float> flat(const ::torch::nn::Module& m) {
  std::vector<float> out;
  for (const auto& p : m.parameters()) {
    auto c = p.detach().contiguous();
    out.insert(out.end(), c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  }
  return out;
}

// The L1 distance of m's parameters from `ref` (a test checks it is > 0 so that a comparison of
// trained parameters is not vacuous: training moved them).
inline double l1_distance(const ::torch::nn::Module& m, const std::vector<float>& ref) {
  const auto start = flat(m);
  double d = 0;
  for (size_t i = 0; i < start.size() && i < ref.size(); ++i) d += std::fabs(start[i] - ref[i]);
  return d;
}

// Runs fn(rank, comm) on `ranks` threads, each with its own Communicator over one memory store.
// Rethrows the first error after joining every thread.
inline void run_ranks(int ranks, const std::string& prefix,
                      const std::function<void(int, std::shared_ptr<edl::Communicator>)>& fn) {
  auto store = edl::make_memory_store();
  std::vector<std::exception_ptr> errors(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        edl::CommunicatorOptions co;
        co.timeout = std::chrono::milliseconds(20000);
        co.connect_timeout = std::chrono::milliseconds(20000);
        fn(r, edl::Communicator::create(store, prefix, r, ranks, co));
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace torch_test
