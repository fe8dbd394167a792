# Refuses a Catch2 test case name holding ';'. catch_discover_tests hands
# ctest the discovered names as a CMake list, which splits a name at ';':
# each half then matches no test case, and ctest counts "No test cases
# matched" as a pass, so the test never runs. (Twelve cases had silently
# not run so.) Usage: cmake -DROOT=<source dir> -P test_names_check.cmake
file(GLOB_RECURSE sources ${ROOT}/tests/*.cpp ${ROOT}/testing/*.cpp)
set(bad "")
foreach(f ${sources})
  file(READ ${f} text)
  # The name's first string literal, or its second (a name split over lines).
  string(REGEX MATCHALL "TEST_CASE\\([^\"]*\"[^\"]*;[^\"]*\"" one "${text}")
  string(REGEX MATCHALL "TEST_CASE\\([^\"]*\"[^\"]*\"[^\",]*\"[^\"]*;[^\"]*\"" two "${text}")
  if(one OR two)
    file(RELATIVE_PATH rel ${ROOT} ${f})
    string(APPEND bad "\n  ${rel}")
  endif()
endforeach()
if(bad)
  message(FATAL_ERROR "test case names with ';' (ctest splits them and runs neither half; "
                      "write ',' instead) in:${bad}")
endif()
message(STATUS "no test case name holds ';' (${CMAKE_CURRENT_LIST_FILE})")
