// The job's id and token, which dtensor-run gives its ranks: the id names the
// job's namespace in the store (two jobs on one store never meet), the token
// is the secret that seals the ranks' rendezvous values (a process without
// it cannot join). See docs/security.md.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "tools/dtensor-run/options.h"

namespace dtensor::run {

struct JobIdentity {
  std::optional<std::string> id;     // unset: the ranks derive one (several nodes, no --job-id)
  std::optional<std::string> token;  // unset: no token (several nodes, none in the environment)
};

/// The id: --job-id, else DTENSOR_JOB_ID of our environment, else a fresh
/// random one on a one-node job. The token: DTENSOR_JOB_TOKEN of our
/// environment, else a fresh random one (64 hex digits) on a one-node job.
/// Several nodes must agree, so there nothing is invented: docs/launcher.md.
/// `getenv` reads our environment (a map in tests).
JobIdentity job_identity(const Options& o, const std::function<const char*(const char*)>& getenv);

/// DTENSOR_JOB_ID and DTENSOR_JOB_TOKEN for the ranks, those that are set.
std::map<std::string, std::string> job_environment(const JobIdentity& job);

/// `bytes` random bytes from the kernel (getrandom), as lowercase hex.
std::string random_hex(std::size_t bytes);

}  // namespace dtensor::run
