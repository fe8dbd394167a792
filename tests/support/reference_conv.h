// Forwarding header: the oracle moved to tools/reference/ so that dtensor-conv
// can share it. Kept so that tests written against the old path (on branches
// merged later) still compile; new code includes tools/reference/reference_conv.h.
#pragma once

#include "tools/reference/reference_conv.h"

namespace dtensor::testing {
using reference::ref_conv_forward;
using reference::ref_conv_grad_bias;
using reference::ref_conv_grad_input;
using reference::ref_conv_grad_weight;
}  // namespace dtensor::testing
