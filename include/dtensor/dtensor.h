// libdtensor: the one header users include.
#pragma once

#include "dtensor/core/distributed.h"
#include "dtensor/core/dtype.h"
#include "dtensor/core/errors.h"
#include "dtensor/core/logging.h"
#include "dtensor/core/process_group.h"
#include "dtensor/core/shape.h"
#include "dtensor/core/store.h"
#include "dtensor/core/tensor.h"
#include "dtensor/core/version.h"
