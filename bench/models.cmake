# model_bench: training / inference throughput of the reference models (bench/model_bench.cc).
edl_add_bench(model_bench model_bench.cc)
target_link_libraries(model_bench PRIVATE edl_models)
if(EDL_BENCH_WITH_LIBTORCH)
  find_package(Torch REQUIRED)
  target_sources(model_bench PRIVATE model_bench_libtorch.cc)
  target_compile_definitions(model_bench PRIVATE EDL_BENCH_WITH_LIBTORCH=1)
  target_link_libraries(model_bench PRIVATE ${TORCH_LIBRARIES})
endif()
