# elastic_bench drives edl-run with the synthetic worker (testing/elastic_worker.cc, target
# edl_test_elastic_worker, built as `elastic_worker`).
edl_add_bench(elastic_bench elastic_bench.cc)
target_compile_definitions(elastic_bench PRIVATE EDL_ELASTIC_WORKER_PATH="$<TARGET_FILE:edl_test_elastic_worker>")
if(TARGET edl-run)
  target_compile_definitions(elastic_bench PRIVATE EDL_RUN_PATH="$<TARGET_FILE:edl-run>")
endif()
add_dependencies(elastic_bench edl_test_elastic_worker)
