// Open MPI baseline rows for allreduce_bench (built with -DEDL_BENCH_WITH_MPI=ON): when the bench
// runs under mpirun, MPI is initialised first and EDL's world is bootstrapped from it (rank 0 starts
// an embedded store server and broadcasts its URL; every rank then gets the environment edl-run
// would give it), so EDL's and MPI's rows come from the same processes, interleaved per iteration.
// The MPI row is named after the byte-transfer layer mpirun selected (OMPI_MCA_btl):
// "mpi_shm" (vader / sm) or "mpi_tcp" (tcp without vader).
// Thread-safety: main-thread helpers.
#pragma once

#include <mpi.h>
#include <stdlib.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "edl/store_server.h"

namespace edl::bench {

inline bool launched_by_mpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr; }

// "mpi_shm" or "mpi_tcp" from the selected BTLs (default Open MPI selection: vader on one host).
inline std::string mpi_row_name() {
  const char* b = std::getenv("OMPI_MCA_btl");
  const std::string btl = b ? b : "";
  if (btl.empty() || btl.find("vader") != std::string::npos || btl.find("sm") != std::string::npos) return "mpi_shm";
  return "mpi_tcp";
}

// MPI_Init, then EDL_STORE / EDL_RANK / EDL_SIZE / EDL_LOCAL_* for edl::init(). Returns the store
// server (rank 0) which must outlive edl::shutdown().
inline std::unique_ptr<StoreServer> init_mpi_world(int* argc, char*** argv) {
  MPI_Init(argc, argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::unique_ptr<StoreServer> server;
  char url[256] = {0};
  if (rank == 0) {
    server = std::make_unique<StoreServer>();
    std::snprintf(url, sizeof(url), "%s", server->url().c_str());
  }
  MPI_Bcast(url, sizeof(url), MPI_CHAR, 0, MPI_COMM_WORLD);
  setenv("EDL_STORE", url, 1);
  setenv("EDL_RANK", std::to_string(rank).c_str(), 1);
  setenv("EDL_SIZE", std::to_string(size).c_str(), 1);
  setenv("EDL_LOCAL_RANK", std::to_string(rank).c_str(), 1);
  setenv("EDL_LOCAL_SIZE", std::to_string(size).c_str(), 1);
  return server;
}

}  // namespace edl::bench
