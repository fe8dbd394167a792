// Points in a save where a test can step in (to kill the process with
// SIGKILL, or to throw), so that the crash and failure paths of the commit
// protocol are exercised for real. Unset, they cost one branch.
#pragma once

#include <functional>

namespace dtensor::checkpoint {

enum class SavePhase {
  ShardFileHalfWritten,  // this rank's shard file partly written, under its temporary name
  ShardFileWritten,      // this rank's shard file durable under its final name
  IndexWritten,          // (index rank) the new index written, not yet renamed into place
  IndexCommitted,        // (index rank) the new index in place, old files not yet removed
};

using SaveHook = std::function<void(SavePhase)>;
/// Replaces the hook (an empty function removes it). For tests.
void set_save_hook(SaveHook hook);
void run_save_hook(SavePhase phase);

}  // namespace dtensor::checkpoint
