// Agreement checks confirmed later, inside autograd's backward().
//
// Every dispatched call checks that all ranks were asked the same
// (PendingAgreement). A call that communicates confirms its check before its
// first wait, behind its own messages; one that does not confirms it when it
// returns, and so waits for the peers' fingerprints: a one-way latency after
// the slowest peer started the call. Over a slow link that wait, at every
// such call, is most of what the step spends beyond the halos.
//
// The calls of a backward pass are the forward's, replayed by the engine in
// an order every rank computes alike from the same graph. Inside a
// DeferredAgreementScope (backward() opens one) the check of a call that has
// not communicated when it returns is queued instead of waited for
// (OpCall::finish_agreement; a window whose exchange is silent does not
// confirm early either). The queue is confirmed, in call order, when a call
// fails (so the earliest disagreement is the error every rank raises), every
// 64 calls, and by the scope's confirm() before backward() writes any
// gradient. A call that communicates still confirms its own check before it
// waits, so a rank asked something else never leaves a peer waiting. A
// disagreement is raised on every rank, by backward(), naming the call where
// the ranks differed. Dropping a queued check (an exception is on its way)
// does not wait: its receive stays posted and takes the peer's message for
// that call, so the checks that follow still pair with their peers'.
#pragma once

#include "dtensor/placement/rank_agreement.h"

namespace dtensor::detail {

class DeferredAgreementScope {
 public:
  DeferredAgreementScope();
  /// Drops what is left unconfirmed (confirm() was not reached: an
  /// exception is leaving the scope).
  ~DeferredAgreementScope();
  DeferredAgreementScope(const DeferredAgreementScope&) = delete;
  DeferredAgreementScope& operator=(const DeferredAgreementScope&) = delete;

  /// Confirms every queued check (the outermost scope only; an inner one
  /// leaves them to it).
  void confirm();

 private:
  bool outermost_;
};

/// Whether a call's check may be queued now: a scope is open on this thread
/// and DTENSOR_DEBUG (whose check gathers descriptions) is off.
bool agreements_deferred();

/// Queues `check` to be confirmed later (agreements_deferred() must hold).
void defer_agreement(PendingAgreement check);

/// Confirms the queued checks in call order; on the first failure drops the
/// rest and throws it. Returns at once when nothing is queued.
void confirm_deferred_agreements();

}  // namespace dtensor::detail
