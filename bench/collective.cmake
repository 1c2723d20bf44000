# Collective benchmarks (docs/collectives.md). Gloo is linked directly for the baseline rows.
edl_add_bench(allreduce_bench allreduce_bench.cc)
target_link_libraries(allreduce_bench PRIVATE gloo)
target_include_directories(allreduce_bench PRIVATE ${GLOO_INCLUDE_DIRS})
if(EDL_BENCH_WITH_MPI)
  # Open MPI baseline rows (mpi_shm / mpi_tcp) when run under mpirun (bench/mpi_world.h).
  set(MPI_CXX_SKIP_MPICXX ON)  # the C API from C++
  find_package(MPI REQUIRED COMPONENTS CXX)
  target_link_libraries(allreduce_bench PRIVATE MPI::MPI_CXX)
  target_compile_definitions(allreduce_bench PRIVATE EDL_BENCH_WITH_MPI=1)
endif()
edl_add_bench(fusion_bench fusion_bench.cc)
target_link_libraries(fusion_bench PRIVATE gloo)
target_include_directories(fusion_bench PRIVATE ${GLOO_INCLUDE_DIRS})
