# FindNCCL: NCCL's header and library, for the GPU path (src/cuda, docs/gpu.md).
#
# Looked for, in order: NCCL_ROOT / $ENV{NCCL_ROOT} / $ENV{NCCL_HOME}, the CUDA toolkit's own prefix
# (CUDA 13 installs put nccl.h and libnccl.so there), the pip package nvidia-nccl-cu13 / -cu12 of
# the Python on PATH (site-packages/nvidia/nccl, libnccl.so.2 only), then the system paths.
# Defines NCCL_FOUND, NCCL_INCLUDE_DIR, NCCL_LIBRARY, NCCL_VERSION and the target NCCL::nccl.
set(_nccl_hints ${NCCL_ROOT} $ENV{NCCL_ROOT} $ENV{NCCL_HOME})
if(CUDAToolkit_LIBRARY_ROOT)
  list(APPEND _nccl_hints ${CUDAToolkit_LIBRARY_ROOT})
endif()
if(CUDAToolkit_INCLUDE_DIRS)
  foreach(_d ${CUDAToolkit_INCLUDE_DIRS})
    get_filename_component(_p ${_d} DIRECTORY)
    list(APPEND _nccl_hints ${_p})
  endforeach()
endif()
find_program(_nccl_python NAMES python3)
if(_nccl_python)
  execute_process(COMMAND ${_nccl_python} -c
      "import os, nvidia.nccl as n; print(os.path.dirname(n.__file__) if n.__file__ else list(n.__path__)[0])"
    OUTPUT_VARIABLE _nccl_pip OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _nccl_pip_rc)
  if(_nccl_pip_rc EQUAL 0 AND _nccl_pip)
    list(APPEND _nccl_hints ${_nccl_pip})
  endif()
endif()

find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints} PATH_SUFFIXES include targets/x86_64-linux/include)
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${_nccl_hints}
  PATH_SUFFIXES lib lib64 targets/x86_64-linux/lib)

if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_v REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
  string(REGEX REPLACE ".*NCCL_MAJOR ([0-9]+).*" "\\1" _maj "${_nccl_v}")
  string(REGEX REPLACE ".*NCCL_MINOR ([0-9]+).*" "\\1" _min "${_nccl_v}")
  string(REGEX REPLACE ".*NCCL_PATCH ([0-9]+).*" "\\1" _pat "${_nccl_v}")
  set(NCCL_VERSION "${_maj}.${_min}.${_pat}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR VERSION_VAR NCCL_VERSION)
if(NCCL_FOUND AND NOT TARGET NCCL::nccl)
  add_library(NCCL::nccl UNKNOWN IMPORTED)
  set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)
