// The ranks' flight recorders (docs/troubleshooting.md) as dtensor-run sees
// them: it points the ranks at a directory of its own unless the user chose
// one (DTENSOR_FLIGHT_RECORDER_DIR), and when a job fails it prints each
// rank's last communication calls, so that one look says which rank was
// where.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace dtensor::run {

/// The directory the ranks write their recorders to: the user's
/// DTENSOR_FLIGHT_RECORDER_DIR when set, else `job_dir`/flight (which goes
/// with the job's private directory). Sets the variable in `env` in the
/// second case.
std::string point_flight_recorders(const std::string& job_dir,
                                   std::map<std::string, std::string>& env);

/// After a failure, the survivors learn of it within a second and write
/// their recorders: waits until every rank that `running` says is still up
/// has a file in `dir`, or `limit` passed.
void wait_for_flight_recorders(const std::string& dir, const std::vector<int>& ranks,
                               const std::function<bool(int)>& running,
                               std::chrono::milliseconds limit);

/// One block per rank with a recorder in `dir`: its last `tail` calls.
void print_flight_summary(std::ostream& out, const std::string& dir, const std::vector<int>& ranks,
                          std::size_t tail = 4);

}  // namespace dtensor::run
