// Forbidden: core is below placement (docs/design.md §3).
#include "dtensor/placement/placement.h"
