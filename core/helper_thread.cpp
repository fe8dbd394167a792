#include "core/detail/helper_thread.h"

namespace dtensor::detail {
namespace {
thread_local bool t_helper = false;
}  // namespace

void mark_helper_thread() {
  t_helper = true;
}

bool on_helper_thread() {
  return t_helper;
}

}  // namespace dtensor::detail
