# A CPU run of the tools never loads the CUDA module: loading it runs the
# initialisers of cuBLAS, cuDNN and NCCL, which cost every rank ~70 ms and
# ~100 MiB of touched pages before the first operator (dtensor-op and
# dtensor-conv once asked whether CUDA was available on every run, to check
# --device). The dynamic loader's own trace (LD_DEBUG=files) names every
# library a process opens, on standard error.
#
# Inputs: CUDA_MODULE (the module's file name), and one -DRUN_<i>=... per
# command (a ;-list), RUNS its count.
foreach(_i RANGE 1 ${RUNS})
  set(_command ${RUN_${_i}})
  execute_process(COMMAND ${CMAKE_COMMAND} -E env LD_DEBUG=files OMP_NUM_THREADS=1 ${_command}
                  RESULT_VARIABLE _rc OUTPUT_QUIET ERROR_VARIABLE _trace)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "'${_command}' failed (${_rc}):\n${_trace}")
  endif()
  if(NOT _trace MATCHES "libdtensor\\.so")
    message(FATAL_ERROR "LD_DEBUG=files printed no trace of the library for '${_command}': "
                        "the check would pass without looking")
  endif()
  string(FIND "${_trace}" "${CUDA_MODULE}" _at)
  if(NOT _at EQUAL -1)
    message(FATAL_ERROR "'${_command}' loaded ${CUDA_MODULE} on a CPU run")
  endif()
endforeach()
