// The operator registry as it was at one moment, to put back: what makes a
// plugin's registration all or nothing (load_plugin restores the snapshot
// when the plugin's registration throws halfway).
#pragma once

#include <memory>

namespace dtensor::detail {

class RegistrySnapshot {
 public:
  RegistrySnapshot();  // takes the snapshot
  ~RegistrySnapshot();
  RegistrySnapshot(const RegistrySnapshot&) = delete;
  RegistrySnapshot& operator=(const RegistrySnapshot&) = delete;
  /// Puts every definition, kernel and handler back as they were.
  void restore();

 private:
  struct Data;
  std::unique_ptr<Data> data_;
};

}  // namespace dtensor::detail
