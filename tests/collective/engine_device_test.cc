// The engine's device requests (collective/device.h, engine_device.cc) with a host-memory stand-in
// for libedl_cuda's backend, so that the engine side of the GPU path is tested on every machine:
// device allreduces are grouped apart from host ones and by kind, a host and a device request of
// one name (or two compressions) are a MismatchError, the backend's completion decides when a
// handle is finished, an InvalidArgument of the backend fails only its requests, a CommError fails
// the generation and reaches the backend's abort(), and a stopped engine aborts the backend.
#include <catch2/catch.hpp>

#include <atomic>
#include <mutex>

#include "collective/device.h"
#include "collective/engine.h"
#include "collective/kind.h"
#include "harness.h"

using namespace edl;
using edl::collective::DeviceBackend;
using edl::collective::DeviceRequest;
using edl::collective::Engine;
using edl::collective::EngineOptions;

namespace {

struct HostRequest : DeviceRequest {
  float* data = nullptr;
  size_t count = 0;
};

// Finished once `released` is set (from any thread).
struct GatedCompletion : detail::DeviceCompletion {
  std::shared_ptr<std::atomic<bool>> released = std::make_shared<std::atomic<bool>>(true);
  bool query() override { return released->load(); }
  void wait() override {
    while (!released->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
};

// Runs device requests on host memory over the rank's communicator, and records what it was given.
class HostBackend : public DeviceBackend {
 public:
  explicit HostBackend(Communicator& comm) : comm_(comm) {}
  std::shared_ptr<detail::DeviceCompletion> run(uint8_t kind, const std::vector<DeviceRequest*>& group, DataType dt,
                                                ReduceOp op, int root) override {
    {
      std::lock_guard<std::mutex> lock(mu);
      runs.push_back({kind, group.size()});
    }
    if (fail_with_invalid.exchange(false)) throw InvalidArgument("host backend: refused");
    if (fail_with_comm.exchange(false)) throw PeerLostError("host backend: peer lost");
    for (DeviceRequest* d : group) {
      auto* r = static_cast<HostRequest*>(d);
      if (kind == collective::kDeviceBroadcast) comm_.broadcast(r->data, r->count, dt, root);
      else comm_.allreduce(r->data, r->count, dt, op);
    }
    auto c = std::make_shared<GatedCompletion>();
    c->released->store(!gate);
    last = c;
    return c;
  }
  void abort(std::exception_ptr error) override {
    std::lock_guard<std::mutex> lock(mu);
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      aborted.push_back(e.what());
    }
  }

  std::mutex mu;
  std::vector<std::pair<uint8_t, size_t>> runs;
  std::vector<std::string> aborted;
  std::atomic<bool> fail_with_invalid{false}, fail_with_comm{false};
  bool gate = false;
  std::shared_ptr<GatedCompletion> last;

 private:
  Communicator& comm_;
};

std::shared_ptr<HostRequest> req(std::vector<float>& v) {
  auto r = std::make_shared<HostRequest>();
  r->data = v.data();
  r->count = v.size();
  return r;
}

// Runs fn(rank, engine, backend) on n thread ranks, each engine with a HostBackend.
void run_device_engines(int n, const std::function<void(int, Engine&, HostBackend&)>& fn) {
  test::run_ranks(n, [&](int rank, collective::TcpCommunicator& comm) {
    std::shared_ptr<Communicator> c(&comm, [](Communicator*) {});
    auto backend = std::make_shared<HostBackend>(comm);
    EngineOptions eo;
    eo.cycle_time = std::chrono::milliseconds(5);
    Engine engine(c, eo, backend);
    fn(rank, engine, *backend);
    engine.stop();
  });
}

}  // namespace

TEST_CASE("engine device requests: fused apart from host requests and by kind, results and completions",
          "[collective][engine][device]") {
  run_device_engines(2, [](int rank, Engine& engine, HostBackend& b) {
    std::vector<std::vector<float>> dev(5, std::vector<float>(7, static_cast<float>(rank + 1)));
    std::vector<std::vector<float>> host(2, std::vector<float>(3, static_cast<float>(rank + 1)));
    std::vector<Handle> hs;
    for (int i = 0; i < 5; ++i)
      hs.push_back(engine.device_request(collective::kDeviceAllreduce, req(dev[i]), 7, DataType::kFloat32,
                                         ReduceOp::kSum, -1, "d" + std::to_string(i)));
    for (int i = 0; i < 2; ++i)
      hs.push_back(engine.allreduce(host[i].data(), 3, DataType::kFloat32, ReduceOp::kSum, "h" + std::to_string(i)));
    for (auto& h : hs) h.wait();
    for (auto& v : dev)
      for (float x : v) TREQUIRE(x == 3.0f);
    for (auto& v : host)
      for (float x : v) TREQUIRE(x == 3.0f);
    size_t device_tensors = 0;
    {
      std::lock_guard<std::mutex> lock(b.mu);
      for (auto& r : b.runs) {
        TREQUIRE(r.first == collective::kDeviceAllreduce);
        device_tensors += r.second;
      }
    }
    TREQUIRE(device_tensors == 5);  // the host requests never reached the backend
    // A handle is finished only when the backend's completion is.
    b.gate = true;
    std::vector<float> g(4, 1.0f);
    Handle h = engine.device_request(collective::kDeviceAllreduce, req(g), 4, DataType::kFloat32, ReduceOp::kSum, -1,
                                     "gated", true);
    std::thread releaser([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      while (!b.last) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      b.last->released->store(true);
    });
    h.wait();
    TREQUIRE(h.poll());
    releaser.join();
    b.gate = false;
  });
}

TEST_CASE("engine device requests: a host and a device request of one name, or two compressions, mismatch",
          "[collective][engine][device]") {
  run_device_engines(2, [](int rank, Engine& engine, HostBackend&) {
    std::vector<float> v(4, 1.0f);
    Handle h = rank == 0 ? engine.allreduce(v.data(), 4, DataType::kFloat32, ReduceOp::kSum, "x")
                         : engine.device_request(collective::kDeviceAllreduce, req(v), 4, DataType::kFloat32,
                                                 ReduceOp::kSum, -1, "x");
    TREQUIRE_THROWS_AS(h.wait(), MismatchError);
    const uint8_t kind = rank == 0 ? collective::kDeviceAllreduce : collective::kDeviceAllreduceFp16;
    Handle c = engine.device_request(kind, req(v), 4, DataType::kFloat32, ReduceOp::kSum, -1, "y");
    TREQUIRE_THROWS_AS(c.wait(), MismatchError);
  });
}

TEST_CASE("engine device requests: the backend's InvalidArgument fails its requests only, a CommError fails the "
          "generation and reaches abort()",
          "[collective][engine][device]") {
  run_device_engines(2, [](int rank, Engine& engine, HostBackend& b) {
    std::vector<float> v(4, 1.0f);
    b.fail_with_invalid = true;
    Handle bad = engine.device_request(collective::kDeviceAllreduce, req(v), 4, DataType::kFloat32, ReduceOp::kSum,
                                       -1, "bad", true);
    TREQUIRE_THROWS_AS(bad.wait(), InvalidArgument);
    Handle good = engine.device_request(collective::kDeviceBroadcast, req(v), 4, DataType::kFloat32, ReduceOp::kSum, 1,
                                        "good", true);
    good.wait();
    if (rank == 0) b.fail_with_comm = true;
    Handle lost = engine.device_request(collective::kDeviceAllreduce, req(v), 4, DataType::kFloat32, ReduceOp::kSum,
                                        -1, "lost", true);
    TREQUIRE_THROWS_AS(lost.wait(), CommError);
    // Later requests fail at once with the generation's error; the backend was told.
    Handle later = engine.device_request(collective::kDeviceAllreduce, req(v), 4, DataType::kFloat32, ReduceOp::kSum,
                                         -1, "later");
    TREQUIRE_THROWS_AS(later.wait(), CommError);
    std::lock_guard<std::mutex> lock(b.mu);
    TREQUIRE(!b.aborted.empty());
  });
}

TEST_CASE("engine device requests: stop() aborts the backend, no backend is an InvalidArgument",
          "[collective][engine][device]") {
  test::run_ranks(1, [](int, collective::TcpCommunicator& comm) {
    std::shared_ptr<Communicator> c(&comm, [](Communicator*) {});
    auto backend = std::make_shared<HostBackend>(comm);
    {
      Engine engine(c, EngineOptions{}, backend);
      engine.stop();
    }
    std::lock_guard<std::mutex> lock(backend->mu);
    TREQUIRE(backend->aborted.size() == 1);
    TREQUIRE(backend->aborted[0] == "collective engine stopped");
  });
  test::run_ranks(1, [](int, collective::TcpCommunicator& comm) {
    std::shared_ptr<Communicator> c(&comm, [](Communicator*) {});
    Engine engine(c, EngineOptions{});
    std::vector<float> v(4, 1.0f);
    Handle h = engine.device_request(collective::kDeviceAllreduce, req(v), 4, DataType::kFloat32, ReduceOp::kSum, -1,
                                     "orphan", true);
    std::string what;
    try {
      h.wait();
    } catch (const InvalidArgument& e) {
      what = e.what();
    }
    TREQUIRE(what.find("no GPU backend") != std::string::npos);
    TREQUIRE_THROWS_AS(engine.device_request(collective::kAllreduce, req(v), 4, DataType::kFloat32, ReduceOp::kSum, -1,
                                             "not-device"),
                       InvalidArgument);
  });
}
