# Decides whether the CUDA module libdtensor-cuda.so (backends/cuda: storage +
# cuDNN, backends/nccl) is built. DTENSOR_WITH_CUDA:
#   AUTO  build it when nvcc, the CUDA runtime, cuDNN and NCCL are all found;
#   ON    the same, but a missing piece is a configure error naming it;
#   OFF   no module: libdtensor reports "built without CUDA" when CUDA is asked for.
# Sets DTENSOR_CUDA_ENABLED and, when ON, the imported targets CUDA::cudart,
# CUDA::cublas, dtensor::cudnn and dtensor::nccl.
set(DTENSOR_CUDA_ENABLED OFF)
string(TOUPPER "${DTENSOR_WITH_CUDA}" _dtensor_cuda_mode)
if(NOT _dtensor_cuda_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "DTENSOR_WITH_CUDA must be AUTO, ON or OFF, not '${DTENSOR_WITH_CUDA}'")
endif()

if(NOT _dtensor_cuda_mode STREQUAL "OFF")
  set(_missing "")
  # The toolkit's usual home, so that AUTO finds it without PATH tweaks.
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    list(APPEND _missing "nvcc (CUDA compiler)")
  endif()
  find_package(CUDAToolkit QUIET)
  if(NOT CUDAToolkit_FOUND)
    list(APPEND _missing "CUDA toolkit (CUDAToolkit: cudart)")
  elseif(NOT TARGET CUDA::cublas)
    list(APPEND _missing "cuBLAS (part of the CUDA toolkit)")
  endif()
  set(_hints ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/lib64
             /usr/local/cuda/include)
  find_library(DTENSOR_CUDNN_LIBRARY NAMES cudnn HINTS ${_hints})
  find_path(DTENSOR_CUDNN_INCLUDE_DIR NAMES cudnn.h HINTS ${_hints})
  find_library(DTENSOR_NCCL_LIBRARY NAMES nccl HINTS ${_hints})
  find_path(DTENSOR_NCCL_INCLUDE_DIR NAMES nccl.h HINTS ${_hints})
  foreach(_v DTENSOR_CUDNN_LIBRARY DTENSOR_CUDNN_INCLUDE_DIR DTENSOR_NCCL_LIBRARY
             DTENSOR_NCCL_INCLUDE_DIR)
    if(NOT ${_v})
      list(APPEND _missing "${_v}")
    endif()
  endforeach()

  if(_missing)
    list(JOIN _missing ", " _missing_str)
    if(_dtensor_cuda_mode STREQUAL "ON")
      message(FATAL_ERROR "DTENSOR_WITH_CUDA=ON but not found: ${_missing_str}. Install the "
                          "CUDA toolkit with cuDNN 9 and NCCL (or set CMAKE_PREFIX_PATH), or "
                          "configure with -DDTENSOR_WITH_CUDA=OFF.")
    endif()
    message(STATUS "dtensor: CUDA backends off (AUTO; not found: ${_missing_str})")
  else()
    # Ampere and Hopper; override with -DCMAKE_CUDA_ARCHITECTURES=... Only the few
    # element-wise kernels are compiled for them (cuDNN and NCCL ship their own).
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    enable_language(CUDA)
    add_library(dtensor::cudnn UNKNOWN IMPORTED)
    set_target_properties(dtensor::cudnn PROPERTIES IMPORTED_LOCATION "${DTENSOR_CUDNN_LIBRARY}"
                          INTERFACE_INCLUDE_DIRECTORIES "${DTENSOR_CUDNN_INCLUDE_DIR}")
    add_library(dtensor::nccl UNKNOWN IMPORTED)
    set_target_properties(dtensor::nccl PROPERTIES IMPORTED_LOCATION "${DTENSOR_NCCL_LIBRARY}"
                          INTERFACE_INCLUDE_DIRECTORIES "${DTENSOR_NCCL_INCLUDE_DIR}")
    set(DTENSOR_CUDA_ENABLED ON)
    message(STATUS "dtensor: CUDA backends on (CUDA ${CUDAToolkit_VERSION}, archs "
                   "${CMAKE_CUDA_ARCHITECTURES}, ${DTENSOR_CUDNN_LIBRARY}, ${DTENSOR_NCCL_LIBRARY})")
  endif()
endif()
