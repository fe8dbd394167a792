# Decides whether the MPI module libdtensor-mpi.so (backends/mpi: process-group
# backend "mpi") is built. DTENSOR_WITH_MPI:
#   AUTO  build it when CMake's FindMPI finds an MPI for C (Debian: libopenmpi-dev);
#   ON    the same, but a missing MPI is a configure error;
#   OFF   no module: backend "mpi" reports "built without MPI".
# Sets DTENSOR_MPI_ENABLED and, when ON, MPI::MPI_CXX and MPIEXEC_EXECUTABLE (the
# tests' mpirun).
set(DTENSOR_MPI_ENABLED OFF)
string(TOUPPER "${DTENSOR_WITH_MPI}" _dtensor_mpi_mode)
if(NOT _dtensor_mpi_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "DTENSOR_WITH_MPI must be AUTO, ON or OFF, not '${DTENSOR_WITH_MPI}'")
endif()
if(NOT _dtensor_mpi_mode STREQUAL "OFF")
  # The C API, from C++ (the project enables no C): no C++ bindings.
  set(MPI_CXX_SKIP_MPICXX ON)
  find_package(MPI COMPONENTS CXX QUIET)
  if(MPI_CXX_FOUND)
    set(DTENSOR_MPI_ENABLED ON)
    message(STATUS "dtensor: MPI module ON (MPI ${MPI_CXX_VERSION}, ${MPIEXEC_EXECUTABLE})")
  elseif(_dtensor_mpi_mode STREQUAL "ON")
    message(FATAL_ERROR "DTENSOR_WITH_MPI=ON but no MPI was found (Debian: libopenmpi-dev)")
  else()
    message(STATUS "dtensor: MPI module OFF (no MPI found; Debian: libopenmpi-dev)")
  endif()
endif()
