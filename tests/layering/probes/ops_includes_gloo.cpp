// Forbidden: ops talks to a ProcessGroup, never to a backend.
#include "backends/gloo/gloo_process_group.h"
