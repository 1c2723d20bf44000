# scale_bench given a bad flag value must exit with code 2 and name the flag (never start a job).
foreach(args "--ranks;1" "--ranks;many" "--store;redis" "--kills;-1" "--cooldown-s;-2" "--step-ms;0" "--params;0"
             "--phase-timeout-s;0")
  execute_process(COMMAND ${CMD} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
  if(NOT rc EQUAL 2)
    message(FATAL_ERROR "scale_bench ${args}: expected exit code 2, got ${rc}: ${err}")
  endif()
  list(GET args 0 flag)
  string(FIND "${err}" "${flag}" pos)
  if(pos EQUAL -1)
    message(FATAL_ERROR "scale_bench ${args}: the message does not name ${flag}: ${err}")
  endif()
endforeach()
