// Forbidden: placement is below ops.
#include "dtensor/ops/registry.h"
