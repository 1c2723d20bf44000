# A bench given an unknown flag must exit with code 2 and name the flag (never abort or hang).
execute_process(COMMAND ${CMD} --no-such-flag RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "${CMD} --no-such-flag: expected exit code 2, got ${rc}: ${err}")
endif()
string(FIND "${err}" "no-such-flag" pos)
if(pos EQUAL -1)
  message(FATAL_ERROR "${CMD}: the message does not name the flag: ${err}")
endif()
