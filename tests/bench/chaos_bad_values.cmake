# chaos_bench given a bad flag value must exit with code 2 and name the problem (never start a job).
foreach(args "--faults;kill,nope" "--phases;commit,lunch" "--trials;0" "--np;1" "--max-np;2" "--store;http://x:1"
             "--mtbf-s;-1" "--faults;" "--trial-timeout-s;1" "--micro-batches;0")
  execute_process(COMMAND ${CMD} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
  if(NOT rc EQUAL 2)
    message(FATAL_ERROR "chaos_bench ${args}: expected exit code 2, got ${rc}: ${err}")
  endif()
  list(GET args 0 flag)
  string(REPLACE "--" "" name "${flag}")
  string(FIND "${err}" "${name}" pos)
  if(pos EQUAL -1)
    message(FATAL_ERROR "chaos_bench ${args}: the message does not name ${flag}: ${err}")
  endif()
endforeach()
