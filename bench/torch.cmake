# torch_bench: edl::torch on the libtorch ResNet20 of examples/torch (overhead at 1 worker, speedup
# at 2 against the two-independent-copies ceiling, overlap on vs off). Built when libtorch is found.
if(EDL_HAVE_TORCH)
  edl_add_bench(torch_bench torch_bench.cc)
  target_link_libraries(torch_bench PRIVATE edl_torch)
  target_include_directories(torch_bench PRIVATE ${PROJECT_SOURCE_DIR}/examples/torch)
endif()
