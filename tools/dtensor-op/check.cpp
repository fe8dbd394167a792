#include "tools/dtensor-op/check.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "tools/cli/tolerance.h"
#include "tools/dtensor-op/op_table.h"

namespace dtensor::op_cli {
namespace {

using Int = std::int64_t;

// Largest |got - ref|, where equal values (infinities included: a max pool
// window without any input element yields -inf, as PyTorch's) and NaN
// against NaN count as no error, and NaN against a number as an infinite one.
double max_abs_err(const Tensor& got, const Tensor& ref) {
  const Tensor a = got.to(DType::F64), b = ref.to(DType::F64);
  const double *pa = a.data<double>(), *pb = b.data<double>();
  double err = 0;
  for (Int i = 0; i < a.numel(); ++i) {
    if (pa[i] == pb[i] || (std::isnan(pa[i]) && std::isnan(pb[i]))) continue;
    const double d = std::abs(pa[i] - pb[i]);
    err = std::max(err, std::isnan(d) ? std::numeric_limits<double>::infinity() : d);
  }
  return err;
}

// Largest finite |ref| (the scale of the tolerance).
double max_finite_abs(const Tensor& ref) {
  const Tensor b = ref.to(DType::F64);
  double m = 0;
  for (Int i = 0; i < b.numel(); ++i)
    if (std::isfinite(b.data<double>()[i])) m = std::max(m, std::abs(b.data<double>()[i]));
  return m;
}

}  // namespace

// `exact`: the result is a selection or a copy of input values, so it must
// equal the oracle's bit for bit. `factor` widens the tolerance where the
// result amplifies rounding errors (the normalisations' 1 / std).
TensorCheck compare(const std::string& name, const Tensor& got, const Tensor& ref, Int terms,
                    DType dtype, int ranks, bool exact, double factor) {
  TensorCheck c;
  c.name = name;
  c.ref_max = max_finite_abs(ref);
  c.tolerance = exact ? 0.0 : cli::tolerance(dtype, terms, ranks, c.ref_max) * factor;
  if (!got.defined() || got.shape() != ref.shape()) {
    // A missing result or a wrong shape is a failure, reported as an infinite error.
    c.max_abs_err = std::numeric_limits<double>::infinity();
    return c;
  }
  c.max_abs_err = max_abs_err(got, ref);
  c.ok = c.max_abs_err <= c.tolerance;
  return c;
}

std::vector<TensorCheck> check_against_reference(const Options& o, const GlobalTensors& g,
                                                 int ranks) {
  std::vector<TensorCheck> out;
  op_entry(o.op).reference(o, g, ranks, out);
  return out;
}

}  // namespace dtensor::op_cli
