# Warnings and sanitizers applied to every target the project builds (the
# library layers, tools, tests, examples, bench). Third-party headers (Gloo,
# oneDNN, Eigen, Catch2, spdlog, ...) come from imported targets, whose include
# directories CMake passes as -isystem, so these flags never reach them.
# Host-compiler flags go to nvcc through -Xcompiler (nvcc rejects -Wall itself).
option(DTENSOR_WERROR "Turn compiler warnings into errors (CI builds with it ON)" OFF)
add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-Wall> $<$<COMPILE_LANGUAGE:CXX>:-Wextra>
                    $<$<COMPILE_LANGUAGE:CXX>:-Wpedantic>
                    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
if(DTENSOR_WERROR)
  # C++ only: nvcc's generated host code trips -Wpedantic/-Wextra in the CUDA
  # runtime's own stubs, so .cu files keep their warnings as warnings.
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
if(DTENSOR_SANITIZE)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${DTENSOR_SANITIZE}>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>)
  add_link_options(-fsanitize=${DTENSOR_SANITIZE})
endif()
