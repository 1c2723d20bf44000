if(NOT TARGET edl_models)  # -DEDL_BUILD_MODELS=OFF: no models to bench
  return()
endif()

# model_bench: training / inference throughput of the reference models (bench/model_bench.cc).
edl_add_bench(model_bench model_bench.cc)
target_link_libraries(model_bench PRIVATE edl_models)
if(EDL_BENCH_WITH_LIBTORCH)
  find_package(Torch REQUIRED)
  target_sources(model_bench PRIVATE model_bench_libtorch.cc)
  target_include_directories(model_bench PRIVATE ${PROJECT_SOURCE_DIR}/examples/torch)  # resnet20.h
  target_compile_definitions(model_bench PRIVATE EDL_BENCH_WITH_LIBTORCH=1)
  target_link_libraries(model_bench PRIVATE ${TORCH_LIBRARIES})
endif()

# timeline_bench: ResNet20 training step with the timeline on and off (bench/timeline_bench.cc).
edl_add_bench(timeline_bench timeline_bench.cc)
target_link_libraries(timeline_bench PRIVATE edl_models)
if(EDL_BUILD_TESTS)
  add_test(NAME "bench: timeline_bench rejects bad flag values"
    COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:timeline_bench> -P ${PROJECT_SOURCE_DIR}/tests/bench/timeline_bad_values.cmake)
  set_tests_properties("bench: timeline_bench rejects bad flag values" PROPERTIES LABELS bench TIMEOUT 120)
endif()

# reproducible_bench: the reproducible mode's cost (step time, bytes) next to the normal mode.
edl_add_bench(reproducible_bench reproducible_bench.cc)
target_link_libraries(reproducible_bench PRIVATE edl_models)
