# Where the build tree's programs look for shared libraries (cmake -P).
#
# An empty entry in a RUNPATH makes the loader search the current directory,
# before the system's directories: a tool started from a directory holding a
# file named like one of its libraries loads that file. CMake once padded
# the tools' and modules' build-tree RUNPATHs with such entries (to rewrite
# them in place at install), so this checks both what the files say and what
# the loader does:
#
#  - no RUNPATH / RPATH of TOOLS or LIBRARIES (the library and the modules
#    it loads) has an empty entry (read with READELF, when there is one);
#  - each of TOOLS runs (--help) from a directory that holds garbage under
#    the names of libraries it needs; loading one would fail the run.
#
# -DWORK_DIR=<scratch> -DTOOLS=<paths> -DLIBRARIES=<paths> [-DREADELF=<path>]
cmake_minimum_required(VERSION 3.20)

foreach(var WORK_DIR TOOLS LIBRARIES)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "library_search_test.cmake needs -D${var}=...")
  endif()
endforeach()

set(failures "")

if(READELF)
  foreach(file IN LISTS TOOLS LIBRARIES)
    execute_process(COMMAND ${READELF} -d ${file} OUTPUT_VARIABLE dynamic ERROR_VARIABLE err
      RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      string(APPEND failures "${READELF} -d ${file}: exit ${rc}: ${err}\n")
      continue()
    endif()
    string(REGEX MATCHALL "(RUNPATH|RPATH)[^\n]*\\[[^]\n]*\\]" entries "${dynamic}")
    foreach(entry IN LISTS entries)
      string(REGEX REPLACE ".*\\[(.*)\\]" "\\1" path "${entry}")
      if(path MATCHES "^:" OR path MATCHES ":$" OR path MATCHES "::" OR path STREQUAL "")
        string(APPEND failures "${file}: an empty search path entry in [${path}]\n")
      endif()
    endforeach()
  endforeach()
else()
  message(STATUS "no readelf: the search paths are checked by running the tools only")
endif()

string(RANDOM LENGTH 12 run)  # a directory of this run's own
set(planted ${WORK_DIR}/planted-libraries-${run})
file(REMOVE_RECURSE ${planted})
file(MAKE_DIRECTORY ${planted})
foreach(name libstdc++.so.6 libc.so.6 libm.so.6 libgcc_s.so.1 libfmt.so.9 libfmt.so.10
             libspdlog.so.1.10 libspdlog.so.1.12 libgomp.so.1 libdnnl.so.2 libdnnl.so.2.6)
  file(WRITE ${planted}/${name} "not a library\n")
endforeach()
foreach(tool IN LISTS TOOLS)
  execute_process(COMMAND ${tool} --help WORKING_DIRECTORY ${planted}
    RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(APPEND failures "${tool} --help, started in ${planted}: exit ${rc}: ${err}\n")
  endif()
endforeach()
file(REMOVE_RECURSE ${planted})

if(failures)
  message(FATAL_ERROR "programs that would load libraries from the current directory:\n"
                      "${failures}")
endif()
