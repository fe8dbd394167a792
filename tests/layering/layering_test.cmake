# One check of the layering rule (docs/architecture.md), run as `cmake -P`:
#
# MODE=probe: compiles PROBE (-fsyntax-only) with the exact command the build
#   uses for LAYER_SOURCE, a file of the layer under test, taken from
#   COMPILE_COMMANDS. EXPECT=pass: it must compile. EXPECT=fail: it must fail
#   because MISSING, the header the layer may not include, is not found — any
#   other outcome (it compiles, or fails for another reason) fails the test.
# MODE=relative: no file of a layer (SOURCE_DIR/{core,placement,ops,backends})
#   includes a header by a relative path ("../"), which would get round the
#   include paths.
# MODE=needs_no_cuda: `ldd LIBRARY` (libdtensor.so) lists no CUDA, cuDNN or
#   NCCL library.
cmake_minimum_required(VERSION 3.25)

if(MODE STREQUAL "needs_no_cuda")
  execute_process(COMMAND ldd ${LIBRARY} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out
                  ERROR_VARIABLE _err)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "ldd ${LIBRARY} failed: ${_err}")
  endif()
  string(REGEX MATCHALL "lib(cuda|cudart|cudnn|nccl|cublas)[^ \t\n]*" _cuda "${_out}")
  if(_cuda)
    message(FATAL_ERROR "${LIBRARY} needs CUDA libraries: ${_cuda}\n${_out}")
  endif()
  message(STATUS "${LIBRARY} needs no CUDA library")
  return()
endif()

if(MODE STREQUAL "relative")
  set(_bad "")
  foreach(_layer core placement ops nn checkpoint data backends)
    file(GLOB_RECURSE _files ${SOURCE_DIR}/${_layer}/*.h ${SOURCE_DIR}/${_layer}/*.cpp
         ${SOURCE_DIR}/${_layer}/*.cu ${SOURCE_DIR}/${_layer}/*.cuh)
    foreach(_f IN LISTS _files)
      file(STRINGS ${_f} _hits REGEX "^[ \t]*#[ \t]*include[ \t]*\"\\.\\.?/")
      if(_hits)
        list(APPEND _bad "${_f}: ${_hits}")
      endif()
    endforeach()
  endforeach()
  if(_bad)
    list(JOIN _bad "\n  " _msg)
    message(FATAL_ERROR "relative includes get round the layering rule:\n  ${_msg}")
  endif()
  message(STATUS "no relative includes in the layers")
  return()
endif()

file(READ ${COMPILE_COMMANDS} _json)
string(JSON _n LENGTH "${_json}")
math(EXPR _last "${_n} - 1")
set(_command "")
foreach(_i RANGE ${_last})
  string(JSON _file GET "${_json}" ${_i} file)
  if(_file MATCHES "/${LAYER_SOURCE}$")
    string(JSON _command GET "${_json}" ${_i} command)
    string(JSON _dir GET "${_json}" ${_i} directory)
    break()
  endif()
endforeach()
if(NOT _command)
  message(FATAL_ERROR "${LAYER_SOURCE} is not in ${COMPILE_COMMANDS}")
endif()

# The layer's command with the probe in place of its source and no output.
separate_arguments(_args UNIX_COMMAND "${_command}")
list(GET _args 0 _first)
if(_first MATCHES "ccache$")
  list(REMOVE_AT _args 0)
endif()
set(_probe_args "")
set(_skip FALSE)
foreach(_a IN LISTS _args)
  if(_skip)
    set(_skip FALSE)
  elseif(_a STREQUAL "-o" OR _a STREQUAL "-c")
    set(_skip TRUE)  # the object, the layer's own source
  elseif(NOT _a MATCHES "^-M")  # dependency-file flags (-MD -MT X -MF Y) follow
    list(APPEND _probe_args "${_a}")
  elseif(_a STREQUAL "-MT" OR _a STREQUAL "-MF")
    set(_skip TRUE)
  endif()
endforeach()
execute_process(COMMAND ${_probe_args} -fsyntax-only ${PROBE} WORKING_DIRECTORY ${_dir}
                RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
get_filename_component(_probe_name ${PROBE} NAME)
if(EXPECT STREQUAL "pass")
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "${_probe_name} should compile with the flags of ${LAYER_SOURCE}:\n"
                        "${_out}${_err}")
  endif()
  message(STATUS "${_probe_name} compiles with the flags of ${LAYER_SOURCE}")
else()
  if(_rc EQUAL 0)
    message(FATAL_ERROR "the layering rule is not enforced: ${_probe_name} includes ${MISSING} "
                        "and compiles with the flags of ${LAYER_SOURCE}")
  endif()
  string(FIND "${_err}" "${MISSING}: No such file" _at)
  if(_at EQUAL -1)
    message(FATAL_ERROR "${_probe_name} failed, but not because ${MISSING} is out of reach:\n"
                        "${_out}${_err}")
  endif()
  message(STATUS "${_probe_name} fails as it should: ${MISSING} is not on the include path of "
                 "${LAYER_SOURCE}'s layer")
endif()
