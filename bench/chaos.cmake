# chaos_bench (issue 13 item 7): random fault schedules against an elastic job under edl-run, with
# the fault-point worker chaos_worker. The ctest runs a few trials of every fault kind and checks
# correctness only (exit status, identical parameters, exactly-once), never timing.
edl_add_bench(chaos_worker chaos_worker.cc)
edl_add_bench(chaos_bench chaos_bench.cc chaos_trial.cc chaos_job.cc)
add_dependencies(chaos_bench chaos_worker)
if(TARGET edl-run)
  add_dependencies(chaos_bench edl-run)
endif()
if(EDL_BUILD_TESTS)
  add_test(NAME "bench: chaos_bench rejects bad flag values"
    COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:chaos_bench> -P ${PROJECT_SOURCE_DIR}/tests/bench/chaos_bad_values.cmake)
  set_tests_properties("bench: chaos_bench rejects bad flag values" PROPERTIES LABELS bench TIMEOUT 120)
endif()
if(EDL_BUILD_TESTS AND TARGET edl-run)
  add_test(NAME "bench: chaos_bench trials (kill in every phase, kill2, stop, stopforever, join, leave, stuck, flood, hostile)"
    COMMAND chaos_bench --trials 4 --seed 7 --faults kill,kill2,stop,stopforever,join,leave,stuck,flood,hostile --edl-run $<TARGET_FILE:edl-run>
            --worker $<TARGET_FILE:chaos_worker>)
  set_tests_properties("bench: chaos_bench trials (kill in every phase, kill2, stop, stopforever, join, leave, stuck, flood, hostile)"
    PROPERTIES LABELS bench TIMEOUT 600)
  # Reproducible mode: kills, joins and leaves, and every trial's final state equals that of the same
  # job run by one worker without faults (matches_reference).
  add_test(NAME "bench: chaos_bench reproducible mode, every trial matches the 1-worker reference"
    COMMAND chaos_bench --trials 3 --seed 11 --faults kill,kill2,join,leave --phases step,commit,sync --deterministic
            --edl-run $<TARGET_FILE:edl-run> --worker $<TARGET_FILE:chaos_worker>)
  set_tests_properties("bench: chaos_bench reproducible mode, every trial matches the 1-worker reference"
    PROPERTIES LABELS bench TIMEOUT 600)
  # Negative control: without the data position in the State a kill breaks the job or the audit.
  add_test(NAME "bench: chaos_bench negative control fails"
    COMMAND chaos_bench --trials 2 --seed 3 --faults kill --phases step --negative-control
            --edl-run $<TARGET_FILE:edl-run> --worker $<TARGET_FILE:chaos_worker>)
  set_tests_properties("bench: chaos_bench negative control fails" PROPERTIES LABELS bench TIMEOUT 600 WILL_FAIL TRUE)
endif()
