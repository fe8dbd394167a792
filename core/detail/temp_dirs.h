// The private directories of dtensor-run ($TMPDIR/dtensor-run-XXXXXX) and of
// a program run alone ($TMPDIR/dtensor-solo-XXXXXX) record the process that
// owns them, so that whatever a SIGKILL, a crash or an uncaught exception
// left behind is removed by the next launch on the host: a directory whose
// owner is gone is garbage. Header-only and internal (not installed: it
// needs POSIX headers): the library and dtensor-run, which does not link the
// library, include it from the source tree.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>

namespace dtensor::temp_dirs {

/// The name of the file that holds "<pid> <start time>" of the owner.
inline constexpr const char* kOwnerFile = "owner";

/// The stems of the directories that are swept.
inline constexpr const char* kStems[] = {"dtensor-run-", "dtensor-solo-"};

/// $TMPDIR, else /tmp.
inline std::string temp_root() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}

/// The start time of process `pid` (field 22 of /proc/PID/stat, in clock
/// ticks since boot), "" when it is gone or a zombie. With the pid it tells
/// the owner from a later process that got the same pid.
inline std::string process_start_time(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  const auto close = line.rfind(')');
  if (close == std::string::npos) return "";
  std::istringstream rest(line.substr(close + 1));
  std::string field, state;
  rest >> state;  // field 3
  if (state == "Z" || state == "X") return "";
  for (int f = 4; f <= 22 && rest >> field; ++f) {
  }
  return field;
}

/// Records this process as the owner of `dir` (best effort: a directory
/// without the record is never swept).
inline void claim(const std::string& dir) {
  const long pid = static_cast<long>(::getpid());
  std::ofstream(dir + "/" + kOwnerFile) << pid << " " << process_start_time(pid) << "\n";
}

/// Removes every dtensor-run-* and dtensor-solo-* directory of $TMPDIR that
/// belongs to this user and whose recorded owner is gone. Never throws.
inline void remove_abandoned() {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (fs::directory_iterator it(temp_root(), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    bool ours = false;
    for (const char* stem : kStems)
      ours = ours || name.rfind(stem, 0) == 0;
    struct stat st {};
    if (!ours || ::lstat(it->path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != ::getuid())
      continue;
    std::ifstream owner(it->path() / kOwnerFile);
    long pid = 0;
    std::string started;
    if (!(owner >> pid >> started) || pid <= 0) continue;  // no record (yet): not ours to judge
    if (process_start_time(pid) == started) continue;      // its owner still runs
    std::error_code ignored;
    fs::remove_all(it->path(), ignored);
  }
}

}  // namespace dtensor::temp_dirs
