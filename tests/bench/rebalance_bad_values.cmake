# rebalance_bench given a bad flag value must exit with code 2 and name the problem (never start a job).
include(${CMAKE_CURRENT_LIST_DIR}/bad_values.cmake)
expect_bad_values(rebalance_bench --modes=wait,nope --rounds=0 --slow-factor=2 --record-ms=0 --steps=5 --batch=0)
