// The flight recorder: the last N communication calls of this process
// (operation, group, peer, bytes, call number, state, times) in a ring
// buffer, so that after a failure each rank can say what it was doing.
// Recording is one short critical section per call (no allocation once the
// ring is full of entries); writing it out happens only on failure, on
// SIGUSR1 and on request (dump_flight_recorder).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace dtensor::detail {

class FlightRecorder {
 public:
  enum class State : std::uint8_t { Started, Completed, Rejected, Failed };

  /// Sets the ring's size (0: record nothing) and forgets what was recorded.
  static void configure(std::size_t capacity, int rank);
  /// Opens an entry; returns its id for finish() (0 when recording is off).
  static std::uint64_t start(std::string_view op, std::string_view group, int peer,
                             std::uint64_t bytes, std::uint64_t call);
  static void finish(std::uint64_t id, State state);
  /// The entries, oldest first, one per line, with a header line.
  static std::string text();
  /// Writes text() to `dir`/dtensor-flight-rank<R>.txt; returns the path, or
  /// "" when it could not be written (logged).
  static std::string write_to(const std::string& dir);
  /// From now on SIGUSR1 writes the recorder to `dir` (the latest one given),
  /// in every world, one rank alone included: the handler wakes a thread
  /// that writes it. A program that installed its own handler keeps it.
  static void write_on_sigusr1(const std::string& dir);
};

/// The file name a rank's recorder is written to (dtensor-run reads it back).
std::string flight_recorder_file_name(int rank);

}  // namespace dtensor::detail
