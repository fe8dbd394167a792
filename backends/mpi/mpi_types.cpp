#include "backends/mpi/mpi_types.h"

#include <array>

#include "core/detail/reduce_kernels.h"

namespace dtensor::mpi_backend {
namespace {

template <typename T, ReduceOp Op>
void combine_fn(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i)
    b[i] = detail::combine<T>(Op, a[i], b[i]);
}

template <typename T>
MPI_Op created_op(ReduceOp op) {
  // Index: Sum (and Avg), Max, Min. Created once; kept for the process.
  static std::array<MPI_Op, 3> ops{MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  const int i = op == ReduceOp::Max ? 1 : op == ReduceOp::Min ? 2 : 0;
  if (ops[i] == MPI_OP_NULL) {
    MPI_User_function* fn = i == 1   ? &combine_fn<T, ReduceOp::Max>
                            : i == 2 ? &combine_fn<T, ReduceOp::Min>
                                     : &combine_fn<T, ReduceOp::Sum>;
    MPI_Op_create(fn, /*commute=*/1, &ops[i]);
  }
  return ops[i];
}

}  // namespace

MPI_Datatype mpi_datatype(DType t) {
  switch (t) {
    case DType::F32:
      return MPI_FLOAT;
    case DType::F64:
      return MPI_DOUBLE;
    case DType::BF16:
    case DType::F16:
      return MPI_UINT16_T;
    case DType::I64:
      return MPI_INT64_T;
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(ReduceOp op, DType t) {
  if (t == DType::BF16) return created_op<BFloat16>(op);
  if (t == DType::F16) return created_op<Float16>(op);
  switch (op) {
    case ReduceOp::Max:
      return MPI_MAX;
    case ReduceOp::Min:
      return MPI_MIN;
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      break;
  }
  return MPI_SUM;
}

}  // namespace dtensor::mpi_backend
