// Forbidden: one backend never includes another's internals.
#include "backends/onednn/onednn_common.h"
