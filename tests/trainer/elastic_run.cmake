# An elastic training run under edl-run must exit 0, report its final test accuracy, and reach at
# least MIN_ACC percent (chance is 10% on the 10-class synthetic set). Arguments: -DRUN=<edl-run>
# -DTRAINER=<edl-resnet20> -DMIN_ACC=<percent>.
execute_process(
  COMMAND ${RUN} --min-np 1 --max-np 2 -np 2
          ${TRAINER} --dataset synthetic --train-records 512 --test-records 256 --epochs 2
          --records-per-shard 128 --batch-size 32
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 280)
set(all "${out}\n${err}")
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "edl-run exited with '${rc}' (expected 0):\n${all}")
endif()
string(REGEX MATCH "final test accuracy: ([0-9]+(\\.[0-9]+)?)%" line "${all}")
if(NOT line)
  message(FATAL_ERROR "no 'final test accuracy: N%' line in the output:\n${all}")
endif()
set(acc "${CMAKE_MATCH_1}")
if(acc LESS MIN_ACC)
  message(FATAL_ERROR "final test accuracy ${acc}% is below the floor of ${MIN_ACC}%:\n${all}")
endif()
string(FIND "${all}" "event=finished" pos)
if(pos EQUAL -1)
  message(FATAL_ERROR "edl-run did not log event=finished:\n${all}")
endif()
message(STATUS "final test accuracy ${acc}% (floor ${MIN_ACC}%), edl-run exit 0")
