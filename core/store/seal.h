// The job token's proof on a store value. A value written by a rank that
// holds the job token (DTENSOR_JOB_TOKEN) is "sealed": it carries an
// HMAC-SHA256 of the job's key and the payload under the token, so that a
// process without the token can neither forge a rendezvous value (its
// address in place of a rank's) nor move a sealed value to another key.
//
// Layout: "DTS1" + 32-byte MAC + payload (sealed), "DTS0" + payload (a job
// without a token). Anything else was not written by this library.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace dtensor::store_detail {

inline constexpr std::string_view kSealedMagic = "DTS1";
inline constexpr std::string_view kPlainMagic = "DTS0";

/// `payload` as stored: sealed with `token` when there is one.
std::string seal(const std::optional<std::string>& token, std::string_view job_key,
                 std::string_view payload);

enum class Seal {
  Valid,         // written by a holder of our token (or, without a token, a plain value)
  OtherToken,    // sealed, but not with our token (another job, or an intruder's guess)
  Unsealed,      // plain, while we hold a token: a process without the token wrote it
  TokenMissing,  // sealed, and we hold no token: we are not part of this job
  Foreign,       // not written by this library
};
struct Opened {
  Seal seal = Seal::Foreign;
  std::string payload;  // when Valid
};
/// Checks `stored` (the value of `job_key`) against `token`.
Opened open_sealed(const std::optional<std::string>& token, std::string_view job_key,
                   std::string_view stored);

}  // namespace dtensor::store_detail
