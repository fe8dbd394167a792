// Forbidden: the MPI backend implements core's ProcessGroup and needs no ops.
#include "dtensor/ops/registry.h"
