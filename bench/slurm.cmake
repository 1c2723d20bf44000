# slurm_bench: EDL on a real Slurm cluster of emulated nodes (testing/slurm_scenarios, examples/slurm).
if(TARGET edl-run)
  edl_add_bench(slurm_bench slurm_bench.cc)
  target_link_libraries(slurm_bench PRIVATE edl_slurm_cluster)
  target_compile_definitions(slurm_bench PRIVATE EDL_RUN_PATH="$<TARGET_FILE:edl-run>"
                                                 EDL_ELASTIC_WORKER_PATH="$<TARGET_FILE:edl_test_elastic_worker>"
                                                 EDL_SLURM_SCRIPTS="${PROJECT_SOURCE_DIR}/examples/slurm")
  add_dependencies(slurm_bench edl-run edl_test_elastic_worker)
  add_test(NAME "bench: slurm_bench rejects bad flag values"
    COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:slurm_bench> -P ${PROJECT_SOURCE_DIR}/tests/bench/slurm_bad_values.cmake)
  set_tests_properties("bench: slurm_bench rejects bad flag values" PROPERTIES LABELS bench TIMEOUT 120)
endif()
