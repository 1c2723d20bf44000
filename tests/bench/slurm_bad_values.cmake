# slurm_bench given a bad flag value must exit with code 2 and name the flag (never start a cluster).
include(${CMAKE_CURRENT_LIST_DIR}/bad_values.cmake)
expect_bad_values(slurm_bench --scenarios=train --scenarios=node_loss,nope --scenarios= --runs=0 --lease-ms=10
                  --step-ms=0)
