// Store URLs ("file:DIR", "redis://[USER:PASSWORD@]HOST:PORT", "rediss://..."),
// parsed without opening anything. Header-only and dependency-free so that
// dtensor-run (which does not link the library) checks --store by exactly
// the library's rules.
//
// Hand-written rather than a std::regex: libstdc++'s regex matcher recurses
// once per character, so a long URL (a 100 kB --store or DTENSOR_STORE)
// overflowed the stack and crashed the launcher or the rank (SIGSEGV).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dtensor {

struct StoreUrl {
  enum class Kind { Invalid, File, Redis };
  /// Why an invalid URL is invalid, for the caller's message.
  enum class Problem { None, BadRedis, BadPort, NoDirectory, BadCredentials };
  Kind kind = Kind::Invalid;
  Problem problem = Problem::None;
  std::string path{};  // File
  std::string host{};  // Redis: a name, an IPv4 address, or [IPv6] without the brackets
  int port = 0;        // Redis: 1..65535
  bool tls = false;    // Redis: "rediss://"
  /// Redis AUTH, percent-decoded: "redis://user:pw@..." or "redis://:pw@..."
  /// (no user: the default user). Empty password: no AUTH.
  std::string user{}, password{};
};

namespace detail {

// RFC 3986 percent-decoding of the user and password; false on a bad escape.
inline bool percent_decode(std::string_view in, std::string& out) {
  auto hex = [](char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
  };
  out.clear();
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out += in[i];
      continue;
    }
    if (i + 2 >= in.size()) return false;
    const int hi = hex(in[i + 1]), lo = hex(in[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return true;
}

}  // namespace detail

/// "redis://HOST:PORT" (or "rediss://", TLS) with HOST made of [A-Za-z0-9_.-]
/// or a bracketed IPv6 address and PORT 1-5 digits in 1..65535, optionally
/// preceded by "USER:PASSWORD@" or ":PASSWORD@" (percent-encoded; the last
/// '@' ends them); "file:DIR" with a non-empty DIR that contains no "://";
/// anything else without "://" is a plain path (a file store). Never throws,
/// whatever the input.
inline StoreUrl parse_store_url(std::string_view url) {
  StoreUrl out;
  constexpr std::string_view kRedis = "redis://", kRediss = "rediss://", kFile = "file:";
  const bool redis = url.substr(0, kRedis.size()) == kRedis;
  const bool rediss = url.substr(0, kRediss.size()) == kRediss;
  if (redis || rediss) {
    out.problem = StoreUrl::Problem::BadRedis;
    std::string_view rest = url.substr(redis ? kRedis.size() : kRediss.size());
    if (const std::size_t at = rest.rfind('@'); at != std::string_view::npos) {
      const std::string_view userinfo = rest.substr(0, at);
      rest = rest.substr(at + 1);
      const std::size_t colon = userinfo.find(':');
      if (colon == std::string_view::npos ||
          !detail::percent_decode(userinfo.substr(0, colon), out.user) ||
          !detail::percent_decode(userinfo.substr(colon + 1), out.password)) {
        out.user.clear();
        out.password.clear();
        out.problem = StoreUrl::Problem::BadCredentials;
        return out;
      }
    }
    const std::size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos) return out;
    std::string_view host = rest.substr(0, colon), port = rest.substr(colon + 1);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
      if (host.empty()) return out;
      for (char c : host)
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') ||
              c == ':'))
          return out;
    } else {
      if (host.empty()) return out;
      for (char c : host)
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              c == '_' || c == '.' || c == '-'))
          return out;
    }
    if (port.empty() || port.size() > 5) return out;
    int p = 0;
    for (char c : port) {
      if (c < '0' || c > '9') return out;
      p = p * 10 + (c - '0');
    }
    if (p < 1 || p > 65535) {
      out.problem = StoreUrl::Problem::BadPort;
      out.port = p;
      return out;
    }
    out.kind = StoreUrl::Kind::Redis;
    out.problem = StoreUrl::Problem::None;
    out.host = std::string(host);
    out.port = p;
    out.tls = rediss;
    return out;
  }
  std::string_view path = url;
  if (url.substr(0, kFile.size()) == kFile) path = url.substr(kFile.size());
  if (path.empty() || path.find("://") != std::string_view::npos) {
    out.problem = StoreUrl::Problem::NoDirectory;
    return out;
  }
  out.kind = StoreUrl::Kind::File;
  out.path = std::string(path);
  return out;
}

/// The URL with its password replaced by "***", for messages and logs.
inline std::string redact_store_url(std::string_view url) {
  const std::size_t scheme = url.find("://");
  if (scheme == std::string_view::npos) return std::string(url);
  const std::size_t at = url.rfind('@');
  if (at == std::string_view::npos || at < scheme) return std::string(url);
  const std::string_view userinfo = url.substr(scheme + 3, at - scheme - 3);
  const std::size_t colon = userinfo.find(':');
  const std::string_view user =
      colon == std::string_view::npos ? std::string_view() : userinfo.substr(0, colon);
  return std::string(url.substr(0, scheme + 3)) + std::string(user) + ":***" +
         std::string(url.substr(at));
}

}  // namespace dtensor
