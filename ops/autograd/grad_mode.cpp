#include "dtensor/ops/autograd.h"

namespace dtensor {
namespace {
// Per thread, as in PyTorch: a no-grad scope on one thread does not stop
// another from recording.
thread_local bool grad_enabled = true;
}  // namespace

bool is_grad_enabled() {
  return grad_enabled;
}

void set_grad_enabled(bool enabled) {
  grad_enabled = enabled;
}

NoGradGuard::NoGradGuard() : previous_(grad_enabled) {
  grad_enabled = false;
}

NoGradGuard::~NoGradGuard() {
  grad_enabled = previous_;
}

}  // namespace dtensor
