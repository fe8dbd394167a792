// A backend may include its own folder and core's headers.
#include "backends/gloo/gloo_process_group.h"
#include "core/detail/split_plan.h"
#include "dtensor/core/process_group.h"
