#include "tools/dtensor-run/job_identity.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace dtensor::run {

std::string random_hex(std::size_t bytes) {
  std::vector<unsigned char> raw(bytes);
  std::size_t got = 0;
  while (got < bytes) {
    const ssize_t n = getrandom(raw.data() + got, bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
    got += static_cast<std::size_t>(n);
  }
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

JobIdentity job_identity(const Options& o, const std::function<const char*(const char*)>& getenv) {
  auto set = [&](const char* name) -> std::optional<std::string> {
    const char* v = getenv(name);
    return v && *v ? std::optional<std::string>(v) : std::nullopt;
  };
  JobIdentity job;
  const bool one_node = o.nnodes == 1;
  job.id = o.job_id ? o.job_id : set("DTENSOR_JOB_ID");
  if (!job.id && one_node) job.id = "run-" + random_hex(8);
  job.token = set("DTENSOR_JOB_TOKEN");
  if (!job.token && one_node) job.token = random_hex(32);
  return job;
}

std::map<std::string, std::string> job_environment(const JobIdentity& job) {
  std::map<std::string, std::string> env;
  if (job.id) env["DTENSOR_JOB_ID"] = *job.id;
  if (job.token) env["DTENSOR_JOB_TOKEN"] = *job.token;
  return env;
}

}  // namespace dtensor::run
