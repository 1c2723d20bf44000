# chaos_bench given a bad flag value must exit with code 2 and name the problem (never start a job).
include(${CMAKE_CURRENT_LIST_DIR}/bad_values.cmake)
expect_bad_values(chaos_bench --faults=kill,nope --phases=commit,lunch --trials=0 --np=1 --max-np=2 --store=http://x:1
                  --mtbf-s=-1 --faults= --trial-timeout-s=1 --micro-batches=0)
