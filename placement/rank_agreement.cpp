// Cheap cross-rank agreement: every rank contributes a fingerprint of what it
// was asked to do; every rank sees all of them, so all throw or none does.
// The blocking form is one all-gather (for 2 ranks one message each way,
// 75 us against 176-394 us for an all-reduce of (h, -h) with max). The posted
// form (PendingAgreement) sends the fingerprint to each peer directly, so it
// can share a round trip with the call's own messages: on a busy VM every
// round trip that follows computation can wait a scheduler tick (up to 4 ms
// on the benchmark VM, docs/performance-p2-step.md), and a local kernel pays none.
#include <cstdlib>

#include "dtensor/core/errors.h"
#include "dtensor/placement/rank_agreement.h"

#include "dtensor/core/config.h"

namespace dtensor {
namespace {

bool debug_checks() {
  return config().debug;
}

// Three 21-bit pieces: each exact in a double, which every backend carries.
constexpr std::int64_t kPieces = 3;
Tensor fingerprint_pieces(std::size_t fingerprint) {
  Tensor t = Tensor::empty({kPieces}, DType::F64);
  for (std::int64_t k = 0; k < kPieces; ++k)
    t.data<double>()[k] = static_cast<double>((fingerprint >> (21 * k)) & 0x1fffff);
  return t;
}

// Whether every block of kPieces in `all` equals `mine`.
bool all_equal(const Tensor& mine, const Tensor& all) {
  const double* m = mine.data<double>();
  const double* p = all.data<double>();
  for (std::int64_t i = 0; i < all.numel(); ++i)
    if (p[i] != m[i % kPieces]) return false;
  return true;
}

InvalidArgument disagreement(const std::string& what) {
  return InvalidArgument("agreement",
                         fmt::format("{}: ranks disagree on the arguments (shapes, placements or "
                                     "parameters differ between ranks; set DTENSOR_DEBUG=1 to "
                                     "see each rank's)",
                                     what));
}

// DTENSOR_DEBUG=1: every rank's description, so the message shows who differs.
std::vector<std::string> gather_descriptions(ProcessGroup& group, const std::string& mine) {
  const int n = group.size();
  Tensor len = Tensor::full({1}, static_cast<double>(mine.size()), DType::F64);
  Tensor lens = Tensor::empty({n}, DType::F64);
  group.allgather(len, lens, std::vector<std::int64_t>(n, 1));
  std::vector<std::int64_t> counts;
  std::int64_t total = 0;
  for (int q = 0; q < n; ++q)
    total += counts.emplace_back(static_cast<std::int64_t>(lens.item({q})));
  // Characters travel as doubles: this is a debug path, clarity beats bytes.
  Tensor in = Tensor::empty({static_cast<std::int64_t>(mine.size())}, DType::F64);
  for (std::size_t i = 0; i < mine.size(); ++i)
    in.data<double>()[i] = static_cast<unsigned char>(mine[i]);
  Tensor all = Tensor::empty({total}, DType::F64);
  group.allgather(in, all, counts);
  std::vector<std::string> out(n);
  std::int64_t at = 0;
  for (int q = 0; q < n; ++q)
    for (std::int64_t i = 0; i < counts[q]; ++i)
      out[q] += static_cast<char>(all.item({at++}));
  return out;
}

// Compares full descriptions (a second, slower exchange that every rank
// makes); ranks whose fingerprints differed disagree even when their
// descriptions read the same.
void check_descriptions(ProcessGroup& group, const std::string& what,
                        const std::string& description, bool fingerprints_same) {
  const auto all = gather_descriptions(group, description);
  bool all_same = fingerprints_same;
  std::string listing;
  for (std::size_t q = 0; q < all.size(); ++q) {
    all_same = all_same && all[q] == all[0];
    listing += fmt::format("\n  rank {}: {}", q, all[q]);
  }
  if (all_same) return;
  throw InvalidArgument("agreement",
                        fmt::format("{}: ranks disagree on the arguments:{}", what, listing));
}

}  // namespace

void check_ranks_agree(ProcessGroup& group, std::size_t fingerprint, const std::string& what,
                       const std::string& description) {
  if (group.size() == 1) return;
  const int n = group.size();
  const Tensor mine = fingerprint_pieces(fingerprint);
  Tensor all = Tensor::empty({kPieces * n}, DType::F64);
  group.allgather(mine, all, std::vector<std::int64_t>(static_cast<std::size_t>(n), kPieces));
  const bool same = all_equal(mine, all);
  if (debug_checks()) return check_descriptions(group, what, description, same);
  if (!same) throw disagreement(what);
}

PendingAgreement::PendingAgreement(std::shared_ptr<ProcessGroup> group, std::size_t fingerprint,
                                   std::string what, std::string description)
    : group_(std::move(group)),
      fingerprint_(fingerprint),
      what_(std::move(what)),
      description_(std::move(description)) {
  const int n = group_->size(), me = group_->rank();
  // The debug form compares descriptions too; it is blocking, in confirm().
  if (n == 1 || debug_checks()) return;
  mine_ = fingerprint_pieces(fingerprint_);
  theirs_ = Tensor::empty({kPieces * (n - 1)}, DType::F64);
  std::vector<P2POp> ops;
  for (int q = 0, slot = 0; q < n; ++q) {
    if (q == me) continue;
    ops.push_back(P2POp::recv(theirs_.narrow(0, kPieces * slot++, kPieces), q, kAgreementTag));
    ops.push_back(P2POp::send(mine_, q, kAgreementTag));
  }
  works_ = group_->batch_isend_irecv(ops);
}

void PendingAgreement::confirm() {
  if (settled()) {
    if (error_) std::rethrow_exception(error_);
    return;
  }
  settled_ = true;
  try {
    if (group_->size() == 1) return;
    if (works_.empty()) return check_ranks_agree(*group_, fingerprint_, what_, description_);
    wait_all(works_);
    works_.clear();
    if (!all_equal(mine_, theirs_)) throw disagreement(what_);
  } catch (...) {
    error_ = std::current_exception();
    throw;
  }
}

bool agreement_descriptions_compared() {
  return debug_checks();
}

int agreed_call_tag(ProcessGroup& group, std::size_t fingerprint) {
  const std::uint64_t n = group.next_call_number();
  const std::uint64_t mixed = (fingerprint ^ (n * 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull;
  return (1 << 30) + 16 + static_cast<int>((mixed >> 32) % (std::uint64_t{1} << 28));
}

}  // namespace dtensor
