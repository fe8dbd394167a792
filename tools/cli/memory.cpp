#include "tools/cli/memory.h"

#include <fstream>
#include <string>

namespace dtensor::cli {
namespace {

// The "Key:   1234 kB" lines of /proc/self/status, in MiB; 0 when absent.
double status_mb(const std::string& text, const char* key) {
  const auto at = text.find(std::string("\n") + key + ":");
  if (at == std::string::npos) return 0;
  return std::stod(text.substr(at + 2 + std::char_traits<char>::length(key))) / 1024.0;
}

std::string status_text() {
  std::ifstream f("/proc/self/status");
  return "\n" + std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace

ResidentSet resident_now() {
  const std::string s = status_text();
  return {status_mb(s, "RssAnon"), status_mb(s, "RssFile"), status_mb(s, "RssShmem")};
}

double peak_rss_mb() {
  return status_mb(status_text(), "VmHWM");
}

bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

}  // namespace dtensor::cli
