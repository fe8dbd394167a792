// Turns Gloo's exceptions into dtensor's typed errors, prefixed "[dtensor.gloo]".
#pragma once

#include <string>

#include <gloo/common/error.h>
#include <gloo/common/logging.h>

#include "backends/gloo/call_name.h"
#include "dtensor/core/errors.h"

namespace dtensor::gloo_backend {

/// Gloo 0.5 reports timeouts as IoException with "Timed out" in the text.
inline bool is_timeout_message(const std::string& msg) {
  // The stores say "Wait timeout for key(s)", the pairs "Read timeout" / "Write timeout".
  return msg.find("Timed out") != std::string::npos || msg.find("timed out") != std::string::npos ||
         msg.find("Timeout") != std::string::npos || msg.find(" timeout") != std::string::npos;
}

/// How a failed connection reads, whatever carried it (a TCP pair, or a
/// shared-memory peer that closed or died): "connection failed (a peer may
/// have died): <why>".
inline std::string connection_failed(const std::string& why) {
  return "connection failed (a peer may have died): " + why;
}

/// Runs fn; a Gloo timeout becomes TimeoutError, any other Gloo failure a
/// CommError, both naming `op` (formatted only then).
template <typename Fn>
void translate_errors(const CallName& op, Fn&& fn) {
  try {
    fn();
  } catch (const ::gloo::IoException& e) {
    if (is_timeout_message(e.what()))
      throw TimeoutError("gloo", op.str() + ": timed out: " + e.what());
    throw CommError("gloo", op.str() + ": " + connection_failed(e.what()));
  } catch (const ::gloo::Exception& e) {
    if (is_timeout_message(e.what()))
      throw TimeoutError("gloo", op.str() + ": timed out: " + e.what());
    throw CommError("gloo", op.str() + ": " + e.what());
  } catch (const ::gloo::EnforceNotMet& e) {
    throw CommError("gloo", op.str() + ": " + e.what());
  }
}

}  // namespace dtensor::gloo_backend
