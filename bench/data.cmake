# Data-layer benches (docs/data.md): reader throughput, and the elastic shard audit.
edl_add_bench(reader_bench reader_bench.cc)
edl_add_bench(shard_audit shard_audit.cc shard_audit_processes.cc)
edl_add_bench(shard_audit_worker shard_audit_worker.cc)
add_dependencies(shard_audit shard_audit_worker)
if(TARGET edl-run)
  add_dependencies(shard_audit edl-run)
endif()
# The default run (kills, joins, graceful leaves and one whole-job crash resumed from the checkpoint
# directory, 3 epochs): every record of every epoch trained exactly once. Label shard_audit (a short
# run of seconds); correctness only, never timing.
if(EDL_BUILD_TESTS AND TARGET edl-run)
  add_test(NAME "bench: shard_audit default run (kills, joins, leaves, a whole-job restart): every record trained once"
    COMMAND shard_audit --edl-run $<TARGET_FILE:edl-run> --worker $<TARGET_FILE:shard_audit_worker>)
  set_tests_properties("bench: shard_audit default run (kills, joins, leaves, a whole-job restart): every record trained once"
    PROPERTIES LABELS "bench;shard_audit" TIMEOUT 600)
endif()
# Straggler rebalancing against waiting and eviction (issue 26): 3 workers under edl-run, one slowed.
edl_add_bench(rebalance_worker rebalance_worker.cc)
edl_add_bench(rebalance_bench rebalance_bench.cc)
add_dependencies(rebalance_bench rebalance_worker)
if(TARGET edl-run)
  add_dependencies(rebalance_bench edl-run)
endif()
if(EDL_BUILD_TESTS)
  add_test(NAME "bench: rebalance_bench rejects bad flag values"
    COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:rebalance_bench> -P ${PROJECT_SOURCE_DIR}/tests/bench/rebalance_bad_values.cmake)
  set_tests_properties("bench: rebalance_bench rejects bad flag values" PROPERTIES LABELS bench TIMEOUT 120)
endif()
