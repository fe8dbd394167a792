// Agreement checks confirmed later, for a stretch of calls whose results the
// caller sees only at its end.
//
// Every dispatched call checks that all ranks were asked the same. A call
// that communicates confirms its check before its first wait, behind its own
// messages; one that does not confirms it when it returns, and so waits for
// the peers' fingerprints: a one-way latency after the slowest peer started
// the call. Over a slow link that wait, at every such call, is most of what
// a step spends beyond its halos and statistics.
//
// While a DeferredAgreementScope is open on a thread, the check of a call
// that has not communicated when it returns is queued instead of waited for.
// The queue is confirmed, in call order, when a call fails (so the earliest
// disagreement is the error every rank raises), every 64 calls, and by the
// outermost scope's confirm(). A call that communicates still confirms its
// own check before it waits, so a rank asked something else never leaves a
// peer waiting. A disagreement is raised on every rank, naming the call where
// the ranks differed, by the call that confirms it: a later call, or
// confirm(). What the calls in between computed (local results of a call the
// ranks disagreed on) must not leave the scope before confirm() returns:
// backward() confirms before it writes any gradient, Module::operator()
// before it returns the module's output. DTENSOR_DEBUG turns deferral off
// (its check gathers descriptions; every call then confirms at once).
#pragma once

namespace dtensor {

class DeferredAgreementScope {
 public:
  DeferredAgreementScope();
  /// Drops what is left unconfirmed (confirm() was not reached: an exception
  /// is leaving the scope). Dropping does not wait: a dropped check's
  /// receive stays posted and takes the peer's message for that call, so
  /// the checks that follow still pair with their peers'.
  ~DeferredAgreementScope();
  DeferredAgreementScope(const DeferredAgreementScope&) = delete;
  DeferredAgreementScope& operator=(const DeferredAgreementScope&) = delete;

  /// Confirms every queued check and throws the first disagreement (the
  /// outermost scope only; an inner one leaves them to it).
  void confirm();

 private:
  bool outermost_;
};

}  // namespace dtensor
