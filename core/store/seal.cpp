#include "core/store/seal.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "dtensor/core/errors.h"

namespace dtensor::store_detail {
namespace {

constexpr std::size_t kMacBytes = 32;

// HMAC-SHA256(token, len(job_key) | job_key | payload): the length keeps
// ("a", "bc") and ("ab", "c") apart.
std::string mac(const std::string& token, std::string_view job_key, std::string_view payload) {
  std::string message = std::to_string(job_key.size()) + ":";
  message.append(job_key);
  message.append(payload);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
            reinterpret_cast<const unsigned char*>(message.data()), message.size(), out, &len) ||
      len != kMacBytes)
    throw CommError("store", "HMAC-SHA256 of a store value failed (libcrypto)");
  return std::string(reinterpret_cast<const char*>(out), len);
}

}  // namespace

std::string seal(const std::optional<std::string>& token, std::string_view job_key,
                 std::string_view payload) {
  std::string out(token ? kSealedMagic : kPlainMagic);
  if (token) out += mac(*token, job_key, payload);
  out.append(payload);
  return out;
}

Opened open_sealed(const std::optional<std::string>& token, std::string_view job_key,
                   std::string_view stored) {
  Opened o;
  if (stored.substr(0, kPlainMagic.size()) == kPlainMagic) {
    o.seal = token ? Seal::Unsealed : Seal::Valid;
    if (!token) o.payload = stored.substr(kPlainMagic.size());
    return o;
  }
  if (stored.substr(0, kSealedMagic.size()) != kSealedMagic ||
      stored.size() < kSealedMagic.size() + kMacBytes)
    return o;  // Foreign
  if (!token) {
    o.seal = Seal::TokenMissing;
    return o;
  }
  const std::string_view their_mac = stored.substr(kSealedMagic.size(), kMacBytes);
  const std::string_view payload = stored.substr(kSealedMagic.size() + kMacBytes);
  const std::string our_mac = mac(*token, job_key, payload);
  // Constant time: the comparison must not tell a guesser how much of a MAC was right.
  if (CRYPTO_memcmp(our_mac.data(), their_mac.data(), kMacBytes) != 0) {
    o.seal = Seal::OtherToken;
    return o;
  }
  o.seal = Seal::Valid;
  o.payload = payload;
  return o;
}

}  // namespace dtensor::store_detail
