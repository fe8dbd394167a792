#include "dtensor/core/dtype.h"

#include <fmt/format.h>

#include "dtensor/core/errors.h"

namespace dtensor {

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
      return 4;
    case DType::F64:
    case DType::I64:
      return 8;
    case DType::BF16:
    case DType::F16:
      return 2;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "f32";
    case DType::F64:
      return "f64";
    case DType::BF16:
      return "bf16";
    case DType::F16:
      return "f16";
    case DType::I64:
      return "i64";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  if (name == "f32" || name == "float32" || name == "float") return DType::F32;
  if (name == "f64" || name == "float64" || name == "double") return DType::F64;
  if (name == "bf16" || name == "bfloat16") return DType::BF16;
  if (name == "f16" || name == "float16" || name == "half") return DType::F16;
  if (name == "i64" || name == "int64") return DType::I64;
  throw InvalidArgument(
      "core", fmt::format("dtype: unknown dtype '{}' (expected f32, f64, bf16, f16 or i64)", name));
}

void require_floating(DType t, std::string_view what) {
  if (is_floating(t)) return;
  throw InvalidArgument("core", fmt::format("{}: {} tensors hold integers (class indices) and have "
                                            "no arithmetic; a floating dtype (f32, f64, bf16 or "
                                            "f16) is needed",
                                            what, dtype_name(t)));
}

namespace detail {
void refuse_integer_dtype(DType t) {
  throw InvalidArgument("core", fmt::format("{} tensors hold integers (class indices) and have no "
                                            "arithmetic; this operation needs a floating dtype "
                                            "(f32, f64, bf16 or f16)",
                                            dtype_name(t)));
}
}  // namespace detail

std::string_view device_type_name(DeviceType t) {
  return t == DeviceType::CPU ? "cpu" : "cuda";
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : fmt::format("cuda:{}", index);
}

}  // namespace dtensor
