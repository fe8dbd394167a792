#include "core/detail/uncaught_failure.h"

#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>

#include "core/detail/fault_monitor.h"

namespace dtensor::detail {
namespace {

std::terminate_handler g_previous = nullptr;

void on_terminate() {
  if (const std::exception_ptr e = std::current_exception()) {
    std::string what = "not a std::exception";
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      what = x.what();
    } catch (...) {
    }
    try {
      // Waits briefly (bounded) until the store has it, so that the peers
      // find the cause when they see this process gone.
      if (auto m = fault_monitor()) m->fail_local("uncaught exception: " + what);
    } catch (...) {
    }
  }
  if (g_previous) g_previous();
  std::abort();
}

}  // namespace

void publish_uncaught_exceptions() {
  static std::once_flag once;
  std::call_once(once, [] { g_previous = std::set_terminate(on_terminate); });
}

}  // namespace dtensor::detail
