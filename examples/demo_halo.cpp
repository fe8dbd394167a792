// Demo: every rank owns a slice of a 1-D signal, swaps one-cell halos with its
// neighbours (no wrap-around: the ends get zeros), smooths its slice with a
// 3-point average, and all-reduces a checksum that rank 0 compares with the
// single-process answer. Run it with `dtensor-run -n 4 -- dtensor-demo-halo`.
#include <cmath>
#include <cstdio>

#include <dtensor/dtensor.h>

int main() try {
  auto pg = dtensor::init_process_group();
  const int rank = pg->rank(), size = pg->size();
  const std::int64_t n = 1 << 20;  // global length
  const std::int64_t chunk = (n + size - 1) / size;
  const std::int64_t begin = std::min<std::int64_t>(rank * chunk, n);
  const std::int64_t len = std::min<std::int64_t>(begin + chunk, n) - begin;

  // The global signal is seeded, so each rank can make just its slice.
  dtensor::Tensor signal = dtensor::Tensor::rand_slice({n}, {begin}, {len}, dtensor::DType::F64, 1);
  // Window = [left halo | own slice | right halo]; halos start as zeros (the edges).
  dtensor::Tensor window = dtensor::Tensor::zeros({len + 2}, dtensor::DType::F64);
  window.narrow(0, 1, len).copy_(signal);

  std::vector<dtensor::P2POp> ops;
  if (rank > 0 && len > 0) {
    ops.push_back(dtensor::P2POp::send(signal.narrow(0, 0, 1), rank - 1));
    ops.push_back(dtensor::P2POp::recv(window.narrow(0, 0, 1), rank - 1));
  }
  if (rank + 1 < size && len > 0) {
    ops.push_back(dtensor::P2POp::send(signal.narrow(0, len - 1, 1), rank + 1));
    ops.push_back(dtensor::P2POp::recv(window.narrow(0, len + 1, 1), rank + 1));
  }
  auto works = pg->batch_isend_irecv(ops);
  dtensor::wait_all(works);

  const double* w = window.data<double>();
  double local_sum = 0;
  for (std::int64_t i = 0; i < len; ++i)
    local_sum += (w[i] + w[i + 1] + w[i + 2]) / 3.0;
  dtensor::Tensor total = dtensor::Tensor::full({1}, local_sum, dtensor::DType::F64);
  pg->allreduce(total);
  std::printf("rank %d/%d: owns [%ld, %ld), exchanged %zu halo messages, sent %lu bytes\n", rank,
              size, static_cast<long>(begin), static_cast<long>(begin + len), ops.size() / 2,
              static_cast<unsigned long>(pg->counters().bytes_sent.load()));

  int status = 0;
  if (rank == 0) {
    // The single-process answer, from the whole signal.
    dtensor::Tensor all = dtensor::Tensor::rand({n}, dtensor::DType::F64, 1);
    const double* a = all.data<double>();
    double expect = 0;
    for (std::int64_t i = 0; i < n; ++i)
      expect += ((i > 0 ? a[i - 1] : 0.0) + a[i] + (i + 1 < n ? a[i + 1] : 0.0)) / 3.0;
    const double err = std::abs(total.item({0}) - expect);
    std::printf("smoothed checksum %.12f, single-process %.12f, |diff| %.2e -> %s\n",
                total.item({0}), expect, err, err < 1e-8 ? "OK" : "MISMATCH");
    status = err < 1e-8 ? 0 : 1;
  }
  dtensor::destroy_process_group();
  return status;
} catch (const std::exception& e) {
  std::fprintf(stderr, "demo failed: %s\n", e.what());
  return 1;
}
