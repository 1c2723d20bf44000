# Emulated hosts (docs/multihost.md): a multi-host job on network namespaces (edl_netns), the commit
# log of its training program (multihost_worker), the control-plane fault scenarios shared by
# tests/multihost and controlplane_bench.
add_library(edl_emulated_hosts STATIC commit_log.cc emulated_hosts.cc controlplane_scenarios.cc)
target_include_directories(edl_emulated_hosts PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(edl_emulated_hosts PUBLIC edl_netns edl PRIVATE nlohmann_json::nlohmann_json)
target_compile_options(edl_emulated_hosts PRIVATE ${EDL_COMPILE_OPTIONS})

add_executable(multihost_worker multihost_worker.cc)
target_link_libraries(multihost_worker PRIVATE edl ZLIB::ZLIB)
target_compile_options(multihost_worker PRIVATE ${EDL_COMPILE_OPTIONS})

if(TARGET edl-run)
  edl_add_bench(controlplane_bench controlplane_bench.cc)
  target_link_libraries(controlplane_bench PRIVATE edl_emulated_hosts)
  target_compile_definitions(controlplane_bench PRIVATE EDL_RUN_PATH="$<TARGET_FILE:edl-run>"
                                                        EDL_MULTIHOST_WORKER_PATH="$<TARGET_FILE:multihost_worker>")
  add_dependencies(controlplane_bench edl-run multihost_worker)
endif()
