# controlplane_bench: the control-plane fault scenarios of testing/controlplane_scenarios on emulated hosts.
if(TARGET edl-run)
  edl_add_bench(controlplane_bench controlplane_bench.cc)
  target_link_libraries(controlplane_bench PRIVATE edl_emulated_hosts)
  target_compile_definitions(controlplane_bench PRIVATE EDL_RUN_PATH="$<TARGET_FILE:edl-run>"
                                                        EDL_MULTIHOST_WORKER_PATH="$<TARGET_FILE:multihost_worker>")
  add_dependencies(controlplane_bench edl-run multihost_worker)
endif()
