// Forbidden: checkpoint is below data.
#include "dtensor/data/load_sharded.h"
