# libFuzzer targets of the collective mesh / wire messages and of the state snapshot and
# checkpoint loader (docs/fuzzing.md). Included from tests/fuzz/CMakeLists.txt (clang only).
# Each target compiles the decoding sources in directly, with ASan + UBSan + libFuzzer.
set(EDL_FUZZ_FLAGS -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
function(edl_add_fuzz name)
  add_executable(${name} ${ARGN})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include
    ${PROJECT_BINARY_DIR}/include)
  target_compile_options(${name} PRIVATE ${EDL_FUZZ_FLAGS})
  target_link_options(${name} PRIVATE -fsanitize=fuzzer,address,undefined)
  # Regression check: run the target once over every file of its seed corpus.
  if(EDL_BUILD_TESTS)
    add_test(NAME fuzz_corpus_${name}
      COMMAND ${name} -runs=0 ${CMAKE_CURRENT_SOURCE_DIR}/corpus/${name})
    set_tests_properties(fuzz_corpus_${name} PROPERTIES LABELS fuzz TIMEOUT 300)
  endif()
endfunction()

set(_src ${PROJECT_SOURCE_DIR}/src)
edl_add_fuzz(mesh_hello_fuzz mesh_hello_fuzz.cc ${_src}/collective/mesh_handshake.cc ${_src}/common/crypto.cc)
target_link_libraries(mesh_hello_fuzz PRIVATE OpenSSL::Crypto)
edl_add_fuzz(collective_header_fuzz collective_header_fuzz.cc ${_src}/collective/wire_header.cc
  ${_src}/common/types.cc)
edl_add_fuzz(negotiation_fuzz negotiation_fuzz.cc ${_src}/collective/negotiation_message.cc ${_src}/common/codec.cc)
edl_add_fuzz(snapshot_fuzz snapshot_fuzz.cc ${_src}/elastic/snapshot.cc ${_src}/elastic/checkpoint.cc
  ${_src}/common/codec.cc ${_src}/common/host_port.cc)
target_link_libraries(snapshot_fuzz PRIVATE ZLIB::ZLIB)
# Stateful's typeinfo lives in state.cc (not linked here): UBSan's vptr check would need it.
target_compile_options(snapshot_fuzz PRIVATE -fno-sanitize=vptr)
