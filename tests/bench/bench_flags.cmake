# Included from bench/CMakeLists.txt (after the bench targets exist): every bench executable rejects
# an unknown flag with exit code 2 and a message naming it (never an abort or a hang).
foreach(b allreduce_bench fusion_bench model_bench reader_bench optimizer_bench elastic_bench shard_audit
          shard_audit_worker chaos_bench chaos_worker store_bench netns_check scaling_bench cluster_sim benchmarks_doc convergence_exp
          controlplane_bench slurm_bench timeline_bench torch_bench scale_bench join_bench gpu_allreduce_bench
          rebalance_bench rebalance_worker reproducible_bench)
  if(TARGET ${b})
    add_test(NAME "bench: ${b} rejects an unknown flag"
      COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:${b}> -P ${CMAKE_CURRENT_LIST_DIR}/bad_flag.cmake)
    set_tests_properties("bench: ${b} rejects an unknown flag" PROPERTIES LABELS bench TIMEOUT 120)
  endif()
endforeach()
