// What a communication call is, for its error messages ("allreduce(sum, 4096
// x f32)", "send to rank 1 tag 7"): formatted only when a message needs it,
// so a call that succeeds builds no string on the hot path.
#pragma once

#include <concepts>
#include <cstdint>
#include <optional>
#include <string>

#include "dtensor/core/dtype.h"
#include "dtensor/core/process_group.h"

namespace dtensor::gloo_backend {

/// A reference to a name: a string, or a callable that formats one. It
/// refers to what it was made from, so it lives no longer than the call it is
/// passed to (a parameter, as std::string_view is).
class CallName {
 public:
  CallName(const char* text) : ctx_(text), fn_(&from_chars) {}  // NOLINT: implicit on purpose
  CallName(const std::string& text) : ctx_(&text), fn_(&from_string) {}  // NOLINT: the same
  template <typename N>
  requires requires(const N& n) {
    { n.str() } -> std::convertible_to<std::string>;
  }
  CallName(const N& name)
      : ctx_(&name), fn_([](const void* c) {  // NOLINT: the same
          return std::string(static_cast<const N*>(c)->str());
        }) {}
  template <typename F>
  requires std::invocable<const F&> &&
      (!std::convertible_to<F, std::string>)CallName(const F& format)
      : ctx_(&format), fn_([](const void* c) {  // NOLINT: the same
          return std::string((*static_cast<const F*>(c))());
        }) {}

  std::string str() const { return fn_(ctx_); }

 private:
  static std::string from_chars(const void* c) { return static_cast<const char*>(c); }
  static std::string from_string(const void* c) { return *static_cast<const std::string*>(c); }

  const void* ctx_;
  std::string (*fn_)(const void*);
};

/// A direct collective's name, kept as its fields: "allreduce(sum, 4 x f32)",
/// "allgather(12 x f64)", as the ring's calls are named.
struct CollectiveName {
  const char* kind = nullptr;  // "allreduce", "allgather"; null: not a collective
  std::optional<ReduceOp> op;
  std::int64_t numel = 0;
  DType dtype = DType::F32;
  std::string str() const;
};

/// A point-to-point transfer's name, kept as its fields: "send to rank 2
/// (world rank 5) tag 7"; a message of a direct collective is named by the
/// collective, as a failure of the ring's would be.
struct P2PName {
  bool is_send = false;
  int peer = 0, world_rank = 0, tag = 0;
  CollectiveName collective{};
  std::string str() const;
};

}  // namespace dtensor::gloo_backend
