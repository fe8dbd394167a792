// Forbidden: core reaches backends only through the interfaces it declares.
#include "backends/gloo/gloo_process_group.h"
