# The GPU path's benchmark (docs/gpu.md), built with edl::cuda. The fusion row times the GPU path's
# own kernels and layout, compiled in from src/cuda (libedl_cuda keeps them hidden).
if(EDL_HAVE_CUDA)
  edl_add_bench(gpu_allreduce_bench
    gpu/gpu_allreduce_bench.cc
    gpu/gpu_bench.cc
    gpu/gpu_ranks.cc
    gpu/gpu_fusion.cc
    gpu/gpu_recovery.cc
    ${PROJECT_SOURCE_DIR}/src/cuda/cuda_kernels.cu
    ${PROJECT_SOURCE_DIR}/src/cuda/fusion_layout.cc)
  target_link_libraries(gpu_allreduce_bench PRIVATE edl_cuda CUDA::cudart NCCL::nccl)
  target_compile_options(gpu_allreduce_bench PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall>)
endif()
