// Forbidden: core's internal headers are core's (and its backends').
#include "core/detail/device_ops.h"
