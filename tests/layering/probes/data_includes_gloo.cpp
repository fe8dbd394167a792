// Forbidden: data reaches backends only through core's interfaces.
#include "backends/gloo/gloo_process_group.h"
