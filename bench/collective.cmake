# Collective benchmarks (docs/collectives.md). Gloo is linked directly for the baseline rows.
edl_add_bench(allreduce_bench allreduce_bench.cc)
target_link_libraries(allreduce_bench PRIVATE gloo)
target_include_directories(allreduce_bench PRIVATE ${GLOO_INCLUDE_DIRS})
edl_add_bench(fusion_bench fusion_bench.cc)
target_link_libraries(fusion_bench PRIVATE gloo)
target_include_directories(fusion_bench PRIVATE ${GLOO_INCLUDE_DIRS})
