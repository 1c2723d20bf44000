# Elastic runtime benchmark (owner: elastic-runtime engineer): elastic_bench drives edl-run with the
# synthetic worker elastic_worker.
add_executable(elastic_worker ${CMAKE_CURRENT_SOURCE_DIR}/elastic_worker.cc)
target_link_libraries(elastic_worker PRIVATE edl ZLIB::ZLIB)
target_compile_options(elastic_worker PRIVATE ${EDL_COMPILE_OPTIONS})
edl_add_bench(elastic_bench elastic_bench.cc)
target_compile_definitions(elastic_bench PRIVATE EDL_ELASTIC_WORKER_PATH="$<TARGET_FILE:elastic_worker>")
if(TARGET edl-run)
  target_compile_definitions(elastic_bench PRIVATE EDL_RUN_PATH="$<TARGET_FILE:edl-run>")
endif()
add_dependencies(elastic_bench elastic_worker)
