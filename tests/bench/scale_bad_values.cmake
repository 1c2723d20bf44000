# scale_bench given a bad flag value must exit with code 2 and name the flag (never start a job).
include(${CMAKE_CURRENT_LIST_DIR}/bad_values.cmake)
expect_bad_values(scale_bench --ranks=1 --ranks=many --store=zookeeper --kills=-1 --cooldown-s=-2 --step-ms=0 --params=0
                  --phase-timeout-s=0 --lease-ms=-5)
