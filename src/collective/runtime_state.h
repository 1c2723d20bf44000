// Runtime: the process-wide state behind edl::init() — config, store connection and the current
// membership generation (its Communicator and background Engine).
//
// This is the collective layer's view of the process: it knows how to build a generation (a
// communicator plus its engine) and which one is current, and nothing of elastic policy. The wiring
// that fills it — edl::init()/shutdown(), which connect the store and either build the static
// generation or start the elastic worker — lives above collective and elastic, in src/runtime/.
//
// The Runtime holds one Generation at a time. The static (non-elastic) mode installs one generation
// from EDL_RANK/EDL_SIZE; the elastic runtime (src/elastic) replaces the generation after each
// rendezvous. Code that runs collectives takes a shared_ptr to the current Generation and keeps it
// for the duration of the call, so a concurrent replacement never frees what is in use.
//
// Thread-safety: all methods are safe from any thread; start()/finish() are called by
// edl::init()/shutdown() only, which serialise them.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/config.h"
#include "edl/communicator.h"
#include "edl/export.h"
#include "edl/store.h"

namespace edl::collective {
class Engine;
class DeviceBackend;
}

namespace edl::detail {

// rank -1, size 0 and no communicator / engine: this process left the elastic job (the elastic
// runtime installs such a generation when edl::elastic::run returns kLeft or throws).
struct Generation {
  uint64_t id = 0;
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::shared_ptr<Communicator> comm;
  std::shared_ptr<collective::Engine> engine;
  // The device side (libedl_cuda's backend, collective/device.h); null when no device plugin is
  // registered in this process.
  std::shared_ptr<collective::DeviceBackend> device;
};

class EDL_API Runtime {  // exported for libedl_cuda (src/cuda/), which adds the device API
 public:
  static Runtime& instance();

  // edl::init(): records the config and the job's store (nullptr without a launcher). Returns false
  // (and changes nothing) when the runtime is already initialized.
  bool start(const Config& config, std::shared_ptr<Store> store);
  // The job's store, creating a memory store when there is none (elastic mode without a launcher).
  std::shared_ptr<Store> ensure_store();
  // edl::init() done: initialized() becomes true.
  void mark_initialized();
  // edl::shutdown(): forgets the store and the generation and stops its engine; returns false when
  // the runtime was not initialized.
  bool finish();
  bool initialized() const;

  const Config& config() const { return config_; }
  // The job's control-plane store (nullptr in a world of size 1 without a launcher).
  std::shared_ptr<Store> store() const;
  // The current generation; throws InvalidArgument("edl::init() has not been called") before init.
  std::shared_ptr<Generation> generation() const;
  // Installs a new generation (elastic runtime); the previous one's engine is stopped.
  void set_generation(std::shared_ptr<Generation> next);

  // Builds a generation: communicator under `prefix` + engine, from the runtime's config. With a
  // device plugin registered (libedl_cuda), also the generation's device backend, built from the
  // current generation's (collective/device.h): a failure there fails the build like the mesh's.
  // connect_timeout: deadline for the mesh (0 = EDL_CONNECT_TIMEOUT_MS); the elastic runtime passes a
  // shorter one so a member that died right after the rendezvous costs seconds, not 30 s.
  // addresses: every rank's mesh_address() when the caller knows them (the elastic decision); the
  // mesh is then dialled at once and accepted on this process's mesh listener
  // (CommunicatorOptions::addresses). Empty: the addresses go through the store.
  std::shared_ptr<Generation> make_generation(uint64_t id, const std::string& prefix, int rank, int size,
                                              int local_rank, int local_size,
                                              std::chrono::milliseconds connect_timeout = std::chrono::milliseconds(0),
                                              std::shared_ptr<const std::atomic<bool>> cancel = nullptr,
                                              const std::vector<std::string>& addresses = {});
  // "host:port" of this process's mesh listener (on config().bind_address), opened when none is: the
  // elastic runtime publishes it with every arrival, so that the peers of the decided generation can
  // dial it before this process starts building. make_generation(..., addresses) accepts on it and
  // closes it once the mesh is built (unless mesh_address() was called meanwhile); a failed build
  // leaves it open for the next arrival (a dial of the failed generation is then refused by the
  // handshake as stale); finish() closes it. A listener opened again takes the port of the last one
  // when it is free: a port picked afresh at an arrival could be the liveness-probe port that a
  // member killed a moment ago left free, and a decider probing that member would reach this
  // listener instead of a refusal (the member then counts as alive until its lease runs out).
  std::string mesh_address();

 private:
  Runtime() = default;
  mutable std::mutex mu_;
  bool initialized_ = false;  // edl::init() completed
  Config config_;
  std::shared_ptr<Store> store_;
  std::shared_ptr<Generation> gen_;
  int mesh_fd_ = -1;  // mesh_address()'s listener
  int mesh_port_ = 0;  // its port, taken again by the next listener (see mesh_address)
  std::string mesh_address_;
  uint64_t mesh_calls_ = 0;  // mesh_address() calls: a build closes the listener only when none came since it began
};

}  // namespace edl::detail
