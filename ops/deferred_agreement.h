// Internals of DeferredAgreementScope (dtensor/ops/deferred_agreement.h):
// the per-thread queue dispatch and the window exchange consult.
#pragma once

#include "dtensor/ops/deferred_agreement.h"
#include "dtensor/placement/rank_agreement.h"

namespace dtensor::detail {

/// Whether a call's check may be queued now: a scope is open on this thread
/// and DTENSOR_DEBUG (whose check gathers descriptions) is off.
bool agreements_deferred();

/// Queues `check` to be confirmed later (agreements_deferred() must hold).
void defer_agreement(PendingAgreement check);

/// Confirms the queued checks in call order; on the first failure drops the
/// rest and throws it. Returns at once when nothing is queued.
void confirm_deferred_agreements();

}  // namespace dtensor::detail
