// Turning one rank's failure into the same error on every rank: each rank
// contributes its outcome (a payload, or the error it caught) to one
// all-gather, and every rank throws the first failure, with its type kept
// and the failing rank named. So a disk error on one rank never leaves the
// others waiting in a later collective.
#pragma once

#include <exception>
#include <string>
#include <vector>

#include "dtensor/core/process_group.h"

namespace dtensor::checkpoint {

/// One string from every rank of `group`, in rank order (two all-gathers: lengths, then bytes).
std::vector<std::string> allgather_strings(ProcessGroup& group, const std::string& mine);

/// Gathers every rank's `payload`, or its `error` when set. Throws, on every
/// rank, the lowest failing rank's error as "<what>: rank R: <message>"
/// (InvalidArgument, CheckpointCorrupt and CommError keep their types; other
/// errors become Error). Returns every rank's payload otherwise.
std::vector<std::string> gather_outcomes(ProcessGroup& group, std::exception_ptr error,
                                         const std::string& payload, const std::string& what);

}  // namespace dtensor::checkpoint
