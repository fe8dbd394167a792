// Checking that every rank of a group was asked to do the same thing, so that
// a call that differs between ranks fails on all of them with one clear error
// instead of leaving some waiting for messages that never come.
#pragma once

#include <cstddef>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dtensor/core/process_group.h"
#include "dtensor/core/tensor.h"

namespace dtensor {

/// Checks cheaply that every rank of `group` passed the same `fingerprint`
/// (one small all-gather). On disagreement every rank throws the same
/// InvalidArgument naming `what`. With DTENSOR_DEBUG=1 the full descriptions
/// are compared and the message shows each rank's.
void check_ranks_agree(ProcessGroup& group, std::size_t fingerprint, const std::string& what,
                       const std::string& description);

/// The same check in two halves, so that it can travel with other messages
/// instead of costing a round trip of its own: the constructor sends this
/// rank's fingerprint to every other rank of `group` (on kAgreementTag) and
/// posts the receives; confirm() waits and throws as check_ranks_agree does.
/// Every rank sees every fingerprint, so all throw or none does.
///
/// Between the two, a caller may post only messages that cannot meet a
/// disagreeing rank's (dispatch gives each call its own tag for that,
/// OpCall::message_tag): their sizes come from the very arguments being
/// checked. Dropped unconfirmed (the caller threw), it does not wait; the
/// group keeps the in-flight buffers alive.
class PendingAgreement {
 public:
  PendingAgreement() = default;  // confirms nothing
  PendingAgreement(std::shared_ptr<ProcessGroup> group, std::size_t fingerprint, std::string what,
                   std::string description);
  PendingAgreement(PendingAgreement&&) = default;
  PendingAgreement& operator=(PendingAgreement&&) = default;

  /// Waits for the other ranks' fingerprints. Throws InvalidArgument when
  /// they differ, or the transport's error; a second call returns or throws
  /// the same without waiting again.
  void confirm();
  /// Whether confirm() has run (successfully or not), or there is nothing to confirm.
  bool settled() const { return !group_ || settled_; }

 private:
  std::shared_ptr<ProcessGroup> group_;
  std::size_t fingerprint_ = 0;
  std::string what_, description_;
  Tensor mine_, theirs_;
  std::vector<std::shared_ptr<Work>> works_;
  bool settled_ = false;
  std::exception_ptr error_;
};

/// Whether descriptions are compared (DTENSOR_DEBUG=1): only then does a
/// caller need to build one, so that an ordinary call builds no string.
bool agreement_descriptions_compared();

/// `describe()` where descriptions are compared, else an empty string.
template <typename Describe>
std::string agreement_description(Describe&& describe) {
  return agreement_descriptions_compared() ? std::forward<Describe>(describe)() : std::string();
}

/// The point-to-point tag of PendingAgreement's messages. Tags from 2^30 up
/// are the library's; a caller's own point-to-point traffic stays below.
inline constexpr int kAgreementTag = (1 << 30) + 1;

/// A tag for the messages a collective call posts before its agreement check
/// is confirmed (a DirectAllreduce): from `fingerprint` (what every rank was
/// asked) and `group`'s next call number (which every rank in step takes
/// alike), in [2^30 + 16, 2^30 + 16 + 2^28). A rank asked something else, or
/// making another call, uses another tag, so its messages never meet these.
int agreed_call_tag(ProcessGroup& group, std::size_t fingerprint);

/// A collective call's agreement check, posted, and the tag (agreed_call_tag)
/// of the messages the call may post before confirming it.
struct CheckedCall {
  CheckedCall(std::shared_ptr<ProcessGroup> group, std::size_t fingerprint, std::string what,
              std::string description)
      : agreement(group, fingerprint, std::move(what), std::move(description)),
        tag(agreed_call_tag(*group, fingerprint)) {}

  /// `f()`, the call's local work before it communicates (validation,
  /// planning); if that throws, the check is confirmed first, so that a
  /// disagreement is the error every rank raises.
  template <typename F>
  auto local(F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (...) {
      agreement.confirm();
      throw;
    }
  }

  PendingAgreement agreement;
  int tag;
};

}  // namespace dtensor
