# Experiment reproductions (docs/experiments.md): the cluster scheduling simulator (Experiments 1, 2).
# The simulator core does not depend on libedl, so its tests can link it alone.
add_library(edl_cluster_sim STATIC cluster_sim.cc cluster_sim_costs.cc cluster_sim_scenarios.cc)
target_include_directories(edl_cluster_sim PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(edl_cluster_sim PRIVATE nlohmann_json::nlohmann_json)
target_compile_options(edl_cluster_sim PRIVATE ${EDL_COMPILE_OPTIONS})

edl_add_bench(cluster_sim cluster_sim_main.cc)
target_link_libraries(cluster_sim PRIVATE edl_cluster_sim)

# Emulated cluster links (network namespaces + veth + tc), used by scaling_bench; netns_check measures them.
add_library(edl_netns STATIC netns.cc)
target_include_directories(edl_netns PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(edl_netns PUBLIC Threads::Threads)
target_compile_options(edl_netns PRIVATE ${EDL_COMPILE_OPTIONS})
edl_add_bench(netns_check netns_check.cc)
target_link_libraries(netns_check PRIVATE edl_netns)

# scaling_bench: the FTlib scaling table (real models, distributed optimizer, edl-run; loopback + emulated links).
if(TARGET edl_models)
  edl_add_bench(scaling_bench scaling_bench.cc)
  target_link_libraries(scaling_bench PRIVATE edl_models edl_netns)
  if(TARGET edl-run)
    target_compile_definitions(scaling_bench PRIVATE EDL_RUN_PATH="$<TARGET_FILE:edl-run>")
    add_dependencies(scaling_bench edl-run)
  endif()
endif()

# convergence_exp: Experiment 3 (convergence under a changing worker count) drives edl-run with the
# edl-resnet20 trainer; the analysis (bench/convergence_analysis.*) is unit-tested in tests/experiments.
if(TARGET edl-resnet20 AND TARGET edl-run)
  edl_add_bench(convergence_exp convergence_exp.cc convergence_analysis.cc)
  target_compile_definitions(convergence_exp PRIVATE EDL_RUN_PATH="$<TARGET_FILE:edl-run>"
                                                     EDL_RESNET20_PATH="$<TARGET_FILE:edl-resnet20>")
  add_dependencies(convergence_exp edl-run edl-resnet20)
endif()

# benchmarks_doc: docs/benchmarks.md + gnuplot scripts from every bench's JSON rows (scripts/run-benchmarks.sh).
add_executable(benchmarks_doc benchmarks_doc.cc)
target_link_libraries(benchmarks_doc PRIVATE nlohmann_json::nlohmann_json cxxopts::cxxopts)
target_compile_options(benchmarks_doc PRIVATE ${EDL_COMPILE_OPTIONS})
