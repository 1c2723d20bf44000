# Fails unless DOC contains the whole of SRC inside one ```cpp block (the doc shows the real program).
file(READ "${DOC}" doc)
file(READ "${SRC}" src)
string(FIND "${doc}" "```cpp\n${src}```" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${DOC} does not show ${SRC} verbatim in a ```cpp block: copy the file into the doc again")
endif()
