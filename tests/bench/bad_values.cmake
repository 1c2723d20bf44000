# include()d by the <bench>_bad_values.cmake scripts (run with -DCMD=<bench executable>):
# expect_bad_values(NAME CASE...) runs CMD with each CASE ("--flag=value", one argument) and fails
# unless it exits with code 2 and its message names the flag (a bad value never starts a run).
function(expect_bad_values name)
  foreach(arg ${ARGN})
    execute_process(COMMAND ${CMD} ${arg} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
    if(NOT rc EQUAL 2)
      message(FATAL_ERROR "${name} ${arg}: expected exit code 2, got ${rc}: ${err}")
    endif()
    string(REGEX REPLACE "^--([^=]*)=.*$" "\\1" flag "${arg}")
    string(FIND "${err}" "${flag}" pos)
    if(pos EQUAL -1)
      message(FATAL_ERROR "${name} ${arg}: the message does not name --${flag}: ${err}")
    endif()
  endforeach()
endfunction()
