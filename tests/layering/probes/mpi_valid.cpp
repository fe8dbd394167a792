// The MPI backend may include its own folder (with mpi.h), and core's headers.
#include "backends/mpi/mpi_process_group.h"
#include "core/detail/reduce_kernels.h"
#include "dtensor/core/process_group.h"
