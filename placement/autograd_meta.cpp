#include "dtensor/placement/autograd_meta.h"

#include <utility>

namespace dtensor::detail {
namespace {
RedistributeRecorder& recorder() {
  static RedistributeRecorder r;
  return r;
}
}  // namespace

void set_redistribute_recorder(RedistributeRecorder r) {
  recorder() = std::move(r);
}

const RedistributeRecorder& redistribute_recorder() {
  return recorder();
}

}  // namespace dtensor::detail
