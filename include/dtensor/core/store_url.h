// Store URLs ("file:DIR", "redis://HOST:PORT"), parsed without opening
// anything. Header-only and dependency-free so that dtensor-run (which does
// not link the library) checks --store by exactly the library's rules.
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
  enum class Problem { None, BadRedis, BadPort, NoDirectory };
  Kind kind = Kind::Invalid;
  Problem problem = Problem::None;
  std::string path;  // File
  std::string host;  // Redis: a name, an IPv4 address, or [IPv6] without the brackets
  int port = 0;      // Redis: 1..65535
};

/// "redis://HOST:PORT" with HOST made of [A-Za-z0-9_.-] or a bracketed IPv6
/// address and PORT 1-5 digits in 1..65535; "file:DIR" with a non-empty DIR
/// that contains no "://"; anything else without "://" is a plain path (a
/// file store). Never throws, whatever the input.
inline StoreUrl parse_store_url(std::string_view url) {
  StoreUrl out;
  constexpr std::string_view kRedis = "redis://", kFile = "file:";
  if (url.substr(0, kRedis.size()) == kRedis) {
    out.problem = StoreUrl::Problem::BadRedis;
    std::string_view rest = url.substr(kRedis.size());
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

}  // namespace dtensor
