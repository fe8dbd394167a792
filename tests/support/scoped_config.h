// A configuration change for the scope of a test: tests change settings
// through the Config (set_config), never through setenv, and put back what
// was there.
#pragma once

#include <functional>

#include "dtensor/core/config.h"

namespace dtensor::testing {

class ScopedConfig {
 public:
  explicit ScopedConfig(const std::function<void(Config&)>& change)
      : saved_(config()), was_overridden_(config_overridden()) {
    Config c = saved_;
    change(c);
    set_config(c);
  }
  ~ScopedConfig() {
    if (was_overridden_)
      set_config(saved_);
    else
      use_environment_config();
  }
  ScopedConfig(const ScopedConfig&) = delete;
  ScopedConfig& operator=(const ScopedConfig&) = delete;

 private:
  Config saved_;
  bool was_overridden_;
};

}  // namespace dtensor::testing
