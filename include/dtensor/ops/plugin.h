// Runtime plugins: a shared library that registers operators, strategies,
// kernels and handlers when loaded.
//
// In the plugin:
//   #include <dtensor/dtensor.h>
//   static void register_my_ops() { dtensor::register_op(...); ... }
//   DTENSOR_PLUGIN(register_my_ops)
// In the program:
//   dtensor::load_plugin("libmyops.so");   // on every rank
#pragma once

#include <string>
#include <vector>

/// Bumped when the registration interface changes incompatibly.
#define DTENSOR_PLUGIN_ABI_VERSION 1

namespace dtensor {

/// Loads the plugin at `path` (once per process: loading it again does
/// nothing) and runs its registration. Throws InvalidArgument naming the path
/// when it cannot be opened, has no entry point, or was built for another ABI.
void load_plugin(const std::string& path);
/// Paths of the plugins loaded so far.
std::vector<std::string> loaded_plugins();

}  // namespace dtensor

/// Defines the plugin's entry points; `register_fn` is a `void()` function.
#define DTENSOR_PLUGIN(register_fn)                                                    \
  extern "C" __attribute__((visibility("default"))) int dtensor_plugin_abi_version() { \
    return DTENSOR_PLUGIN_ABI_VERSION;                                                 \
  }                                                                                    \
  extern "C" __attribute__((visibility("default"))) void dtensor_plugin_register() {   \
    register_fn();                                                                     \
  }
