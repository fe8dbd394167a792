// A plugin whose registration fails halfway: it registers an operator of its
// own, then tries to replace a built-in one without override_existing. The
// registry must be left as it was (tests/ops/plugin_registration_tests.cpp).
#include <dtensor/dtensor.h>

namespace {

void register_half() {
  dtensor::OpDef mine;
  mine.name = "test::half_registered";
  mine.output_meta = [](const dtensor::OpSchema& s) {
    return std::vector<dtensor::TensorMeta>{{s.dtensor(0).shape(), s.dtensor(0).dtype()}};
  };
  dtensor::register_op(mine);
  dtensor::OpDef clash;
  clash.name = "convolution";  // built in: refused without override_existing
  dtensor::register_op(clash);
}

}  // namespace

DTENSOR_PLUGIN(register_half)
