// Forbidden: core loads the MPI module at run time and never includes it.
#include "backends/mpi/mpi_process_group.h"
