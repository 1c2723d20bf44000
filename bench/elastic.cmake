# elastic_bench drives edl-run with the synthetic worker (testing/elastic_worker.cc, target
# edl_test_elastic_worker, built as `elastic_worker`).
edl_add_bench(elastic_bench elastic_bench.cc)
target_compile_definitions(elastic_bench PRIVATE EDL_ELASTIC_WORKER_PATH="$<TARGET_FILE:edl_test_elastic_worker>")
if(TARGET edl-run)
  target_compile_definitions(elastic_bench PRIVATE EDL_RUN_PATH="$<TARGET_FILE:edl-run>")
endif()
add_dependencies(elastic_bench edl_test_elastic_worker)

# join_bench: the survivors' cost of a join, stop vs stop-free (EDL_JOIN), with the same worker.
edl_add_bench(join_bench join_bench.cc)
target_compile_definitions(join_bench PRIVATE EDL_ELASTIC_WORKER_PATH="$<TARGET_FILE:edl_test_elastic_worker>")
add_dependencies(join_bench edl_test_elastic_worker)

# autoscale_bench: edl-run --autoscale on ResNet20 vs the measured images/s at each world size.
if(TARGET edl_models AND TARGET edl-run)
  edl_add_bench(autoscale_bench autoscale_bench.cc ${PROJECT_SOURCE_DIR}/src/launcher/autoscaler.cc)
  target_link_libraries(autoscale_bench PRIVATE edl_models)
  target_compile_definitions(autoscale_bench PRIVATE EDL_RUN_PATH="$<TARGET_FILE:edl-run>")
  add_dependencies(autoscale_bench edl-run)
endif()
