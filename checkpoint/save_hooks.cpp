#include "checkpoint/save_hooks.h"

#include <utility>

namespace dtensor::checkpoint {

namespace {
SaveHook& hook() {
  static SaveHook h;
  return h;
}
}  // namespace

void set_save_hook(SaveHook h) {
  hook() = std::move(h);
}

void run_save_hook(SavePhase phase) {
  if (hook()) hook()(phase);
}

}  // namespace dtensor::checkpoint
