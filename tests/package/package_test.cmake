# Driver of the package tests (cmake -P). MODE selects the step:
#   install       cmake --install the build into PREFIX; check the layout, that
#                 no private dependency leaks into the exported interface, and
#                 that installed headers include only installed headers; that
#                 libdtensor.so needs no CUDA library and no MPI, and the
#                 CUDA module (CUDA_MODULE=ON) and the MPI module
#                 (MPI_MODULE=ON) are installed beside it
#   find_package  configure + build consumer/ with CMAKE_PREFIX_PATH=PREFIX, run
#                 its ctest (the consumer on 2 ranks under dtensor::dtensor-run)
#                 and its DTENSOR_TEST_CASEs (dtensor::testing, found by
#                 catch_discover_tests)
#   pkg_config    compile consumer/main.cpp with `pkg-config dtensor`, run it
#                 on 2 ranks with PREFIX/bin/dtensor-run; compile
#                 consumer/multi_rank_tests.cpp with `pkg-config dtensor-testing`
#                 and run it (it starts its own ranks)
cmake_minimum_required(VERSION 3.20)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "failed (${rc}): ${cmd}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

function(require_file path)
  if(NOT EXISTS ${PREFIX}/${path})
    message(FATAL_ERROR "not installed: ${path}")
  endif()
endfunction()

if(SANITIZE)
  set(san_flags -fsanitize=${SANITIZE})
endif()

if(MODE STREQUAL "install")
  file(REMOVE_RECURSE ${PREFIX})
  run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX})
  foreach(f include/dtensor/dtensor.h include/dtensor/core/version.h bin/dtensor-run
            ${LIBDIR}/libdtensor.so ${LIBDIR}/cmake/dtensor/dtensorConfig.cmake
            ${LIBDIR}/cmake/dtensor/dtensorConfigVersion.cmake
            ${LIBDIR}/cmake/dtensor/dtensorTargets.cmake ${LIBDIR}/pkgconfig/dtensor.pc
            include/dtensor/testing.h ${LIBDIR}/libdtensor_testing.a
            ${LIBDIR}/cmake/dtensor/dtensorTestingTargets.cmake
            ${LIBDIR}/pkgconfig/dtensor-testing.pc)
    require_file(${f})
  endforeach()

  # The CUDA module lies beside the library, which needs no CUDA library
  # itself; the module finds that library through its $ORIGIN RUNPATH.
  run(ldd ${PREFIX}/${LIBDIR}/libdtensor.so)
  if(run_output MATCHES "lib(cudart|cudnn|nccl)")
    message(FATAL_ERROR "the installed libdtensor.so needs CUDA libraries:\n${run_output}")
  endif()
  if(run_output MATCHES "libmpi")
    message(FATAL_ERROR "the installed libdtensor.so needs an MPI library:\n${run_output}")
  endif()
  if(MPI_MODULE)
    require_file(${LIBDIR}/libdtensor-mpi.so)
    run(ldd ${PREFIX}/${LIBDIR}/libdtensor-mpi.so)
    if(NOT run_output MATCHES "libdtensor\\.so[^ ]* => ${PREFIX}/${LIBDIR}/libdtensor\\.so")
      message(FATAL_ERROR "the installed MPI module does not use the libdtensor.so beside it:\n"
                          "${run_output}")
    endif()
  endif()
  if(CUDA_MODULE)
    require_file(${LIBDIR}/libdtensor-cuda.so)
    run(ldd ${PREFIX}/${LIBDIR}/libdtensor-cuda.so)
    if(NOT run_output MATCHES "libdtensor\\.so[^ ]* => ${PREFIX}/${LIBDIR}/libdtensor\\.so")
      message(FATAL_ERROR "the installed CUDA module does not use the libdtensor.so beside it:\n"
                          "${run_output}")
    endif()
  endif()

  # The installed tools run from the prefix (dtensor-conv links libdtensor.so
  # through its $ORIGIN-relative RPATH).
  run(${PREFIX}/bin/dtensor-run --help)
  if(EXISTS ${BUILD_DIR}/bin/dtensor-conv)
    require_file(bin/dtensor-conv)
    run(${PREFIX}/bin/dtensor-conv --help)
  endif()
  if(EXISTS ${BUILD_DIR}/bin/dtensor-ckpt)
    require_file(bin/dtensor-ckpt)
    run(${PREFIX}/bin/dtensor-ckpt --help)
  endif()

  # Private dependencies stay inside libdtensor.so: neither the config, nor the
  # targets' INTERFACE_* properties, nor dtensor.pc name them. (The per-config
  # file's IMPORTED_LINK_DEPENDENT_LIBRARIES does, by design: it only helps the
  # linker find libdtensor.so's own DT_NEEDED entries, and requires nothing.)
  file(GLOB targets ${PREFIX}/${LIBDIR}/cmake/dtensor/*.cmake)
  foreach(f ${targets} ${PREFIX}/${LIBDIR}/pkgconfig/dtensor.pc
            ${PREFIX}/${LIBDIR}/pkgconfig/dtensor-testing.pc)
    file(STRINGS ${f} text)
    list(FILTER text EXCLUDE REGEX "IMPORTED_LINK_DEPENDENT_LIBRARIES")
    foreach(private gloo dnnl DNNL Eigen OpenMP omp ZLIB nlohmann)
      if("${text}" MATCHES "[^a-zA-Z]${private}[^a-zA-Z]")
        message(FATAL_ERROR "${f} mentions the private dependency '${private}'")
      endif()
    endforeach()
  endforeach()

  # Every installed header includes only the standard library, fmt, spdlog
  # and other installed dtensor headers; dtensor/testing.h also Catch2's
  # (a dependency of dtensor::testing and dtensor-testing.pc).
  file(GLOB_RECURSE headers RELATIVE ${PREFIX}/include ${PREFIX}/include/dtensor/*)
  foreach(h ${headers})
    file(STRINGS ${PREFIX}/include/${h} lines REGEX "^[ \t]*#[ \t]*include")
    foreach(line ${lines})
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*[<\"]([^>\"]+)[>\"].*" "\\1" inc "${line}")
      if(inc MATCHES "^dtensor/")
        if(NOT EXISTS ${PREFIX}/include/${inc})
          message(FATAL_ERROR "${h} includes ${inc}, which is not installed")
        endif()
      elseif(h STREQUAL "dtensor/testing.h" AND inc STREQUAL "catch2/catch.hpp")
      elseif(NOT inc MATCHES "^(fmt|spdlog)/" AND inc MATCHES "[./]")
        message(FATAL_ERROR "${h} includes ${inc}: not a public header")
      endif()
    endforeach()
  endforeach()
  list(LENGTH headers n)
  message(STATUS "installed ${n} headers, all self-contained in the install tree")

elseif(MODE STREQUAL "find_package")
  set(build ${WORK_DIR}/consumer-cmake)
  file(REMOVE_RECURSE ${build})
  set(flags)
  if(san_flags)
    set(flags -DCMAKE_CXX_FLAGS=${san_flags} -DCMAKE_EXE_LINKER_FLAGS=${san_flags})
  endif()
  run(${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${build} -G Ninja -DCMAKE_CXX_COMPILER=${CXX}
      -DCMAKE_PREFIX_PATH=${PREFIX} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF ${flags})
  run(${CMAKE_COMMAND} --build ${build})
  run(${CMAKE_CTEST_COMMAND} --test-dir ${build} --output-on-failure)
  # catch_discover_tests found the DTENSOR_TEST_CASEs: each ran as its own test.
  foreach(name "a tensor sharded over 2 ranks gathers back whole"
               "an all-reduce over 3 ranks sums the ranks")
    string(FIND "${run_output}" "${name}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "ctest did not run the DTENSOR_TEST_CASE '${name}'")
    endif()
  endforeach()

elseif(MODE STREQUAL "pkg_config")
  find_program(PKG_CONFIG pkg-config REQUIRED)
  set(ENV{PKG_CONFIG_PATH} ${PREFIX}/${LIBDIR}/pkgconfig)
  run(${PKG_CONFIG} --cflags --libs dtensor)
  string(STRIP "${run_output}" pc_flags)
  separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
  run(${PKG_CONFIG} --variable=libdir dtensor)
  string(STRIP "${run_output}" libdir)
  set(exe ${WORK_DIR}/consumer-pkgconfig)
  file(REMOVE ${exe})
  # No -std flag from pkg-config: C++20 is the user's choice of compiler mode.
  run(${CXX} -std=c++20 ${san_flags} ${CONSUMER_DIR}/main.cpp -o ${exe} ${pc_flags}
      -Wl,-rpath,${libdir})
  run(${PREFIX}/bin/dtensor-run -n 2 -- ${exe})

  # The multi-rank Catch2 tests: dtensor-testing brings Catch2 and its main;
  # the binary starts the ranks of each case itself.
  run(${PKG_CONFIG} --cflags --libs dtensor-testing)
  string(STRIP "${run_output}" pc_flags)
  separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
  set(tests_exe ${WORK_DIR}/consumer-tests-pkgconfig)
  file(REMOVE ${tests_exe})
  run(${CXX} -std=c++20 ${san_flags} ${CONSUMER_DIR}/multi_rank_tests.cpp -o ${tests_exe}
      ${pc_flags} -Wl,-rpath,${libdir})
  run(${tests_exe})
  if(NOT run_output MATCHES "All tests passed \\([0-9]+ assertions in 2 test cases\\)")
    message(FATAL_ERROR "expected both DTENSOR_TEST_CASEs to pass:\n${run_output}")
  endif()
else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()
