# timeline_bench given a bad flag value must exit with code 2 and name the flag (never start a run).
include(${CMAKE_CURRENT_LIST_DIR}/bad_values.cmake)
expect_bad_values(timeline_bench --ranks=1 --batch=0 --steps=0 --warmup=-1 --repeats=0 --dir=/nonexistent-edl-dir)
