// Typed errors. Every message starts with the component that raised it, e.g.
// "[dtensor.gloo] allreduce: peer 2 closed the connection", so a user reading a
// log from many ranks can tell at once which layer failed.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace dtensor {

/// Base of all libdtensor errors.
class Error : public std::runtime_error {
 public:
  Error(std::string_view component, const std::string& what)
      : std::runtime_error(fmt::format("[dtensor.{}] {}", component, what)),
        component_(component) {}
  const std::string& component() const { return component_; }

 private:
  std::string component_;
};

/// The caller passed something invalid (a shape, a parameter, a setting).
/// Raised before any data moves, and identically on every rank.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

/// A valid request that this build or backend cannot serve.
class NotSupported : public Error {
 public:
  using Error::Error;
};

/// A communication failure: a peer died, a connection broke, a rendezvous failed.
class CommError : public Error {
 public:
  using Error::Error;
};

/// A communication operation did not finish within its timeout.
class TimeoutError : public CommError {
 public:
  using CommError::CommError;
};

/// Throws InvalidArgument(component, formatted message) unless `cond` holds.
template <typename... Args>
void check_arg(bool cond, std::string_view component, fmt::format_string<Args...> f,
               Args&&... args) {
  if (!cond) throw InvalidArgument(component, fmt::format(f, std::forward<Args>(args)...));
}

namespace detail {
template <typename... Args>
[[noreturn]] void throw_invalid_argument(std::string_view component, fmt::format_string<Args...> f,
                                         Args&&... args) {
  throw InvalidArgument(component, fmt::format(f, std::forward<Args>(args)...));
}
}  // namespace detail

}  // namespace dtensor

/// check_arg whose message arguments are evaluated only when `cond` fails,
/// as TORCH_CHECK's are: for checks on paths every call runs whose message
/// costs something to build (shape_str, a spec's or a mesh's str()), which
/// check_arg, a function, would build on every call.
#define DTENSOR_CHECK_ARG(cond, component, ...)                            \
  do {                                                                     \
    if (!(cond)) [[unlikely]]                                              \
      ::dtensor::detail::throw_invalid_argument((component), __VA_ARGS__); \
  } while (0)
