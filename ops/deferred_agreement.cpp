#include "ops/deferred_agreement.h"

#include <deque>
#include <utility>

#include "dtensor/core/config.h"

namespace dtensor {
namespace detail {
namespace {

struct Deferred {
  int depth = 0;
  std::deque<PendingAgreement> queue;
};

// Per thread: dispatch runs a call on the thread that made it.
Deferred& deferred() {
  thread_local Deferred d;
  return d;
}

// A long stretch of calls confirms in batches, so that the queue's buffers and
// the distance between a disagreement and its error stay bounded.
constexpr std::size_t kMaxQueued = 64;

}  // namespace
}  // namespace detail

using detail::deferred;

DeferredAgreementScope::DeferredAgreementScope() : outermost_(deferred().depth++ == 0) {}

DeferredAgreementScope::~DeferredAgreementScope() {
  auto& d = deferred();
  --d.depth;
  if (outermost_) d.queue.clear();
}

void DeferredAgreementScope::confirm() {
  if (outermost_) detail::confirm_deferred_agreements();
}

namespace detail {

bool agreements_deferred() {
  return deferred().depth > 0 && !config().debug;
}

void defer_agreement(PendingAgreement check) {
  Deferred& d = deferred();
  d.queue.push_back(std::move(check));
  if (d.queue.size() >= kMaxQueued) confirm_deferred_agreements();
}

void confirm_deferred_agreements() {
  Deferred& d = deferred();
  while (!d.queue.empty()) {
    try {
      d.queue.front().confirm();
    } catch (...) {
      d.queue.clear();
      throw;
    }
    d.queue.pop_front();
  }
}

}  // namespace detail
}  // namespace dtensor
