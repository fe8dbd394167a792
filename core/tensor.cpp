#include "dtensor/core/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "core/detail/device_ops.h"
#include "core/detail/strided_loop.h"

namespace dtensor {
namespace {

template <typename To, typename From>
To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (is_half_float_v<To>) {
    // f64 goes through float first, as PyTorch's c10::Half/BFloat16 do (so a
    // rare f64 tie may round twice).
    return To(static_cast<float>(v));
  } else if constexpr (is_half_float_v<From>) {
    return static_cast<To>(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

template <typename T>
double as_double(T v) {
  if constexpr (is_half_float_v<T>)
    return static_cast<float>(v);
  else
    return static_cast<double>(v);
}

// splitmix64: a counter-based generator, so element i's value needs only (seed, i).
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
double uniform_pm1(std::uint64_t seed, std::uint64_t i) {
  const std::uint64_t r = mix(mix(seed) ^ (i * 0xd1b54a32d192ed03ull));
  return static_cast<double>(r >> 11) * 0x1.0p-53 * 2.0 - 1.0;
}

}  // namespace

Tensor::Tensor(std::shared_ptr<Storage> storage, std::int64_t offset, Shape shape, Shape strides,
               DType dtype)
    : storage_(std::move(storage)),
      offset_(offset),
      layout_(std::make_shared<const Layout>(Layout{std::move(shape), std::move(strides)})),
      dtype_(dtype) {}

const Shape& Tensor::no_extents() {
  static const Shape none;
  return none;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (auto e : shape)
    DTENSOR_CHECK_ARG(e >= 0, "core", "empty: negative extent in shape {}", shape_str(shape));
  // Elements and bytes both checked: an overflowing size would allocate a
  // small buffer that the tensor then writes past.
  std::int64_t bytes = 0;
  DTENSOR_CHECK_ARG(!__builtin_mul_overflow(shape_numel(shape),
                                            static_cast<std::int64_t>(dtype_size(dtype)), &bytes),
                    "core", "empty: shape {} of {} needs more than 2^63 bytes", shape_str(shape),
                    dtype_name(dtype));
  auto st = Storage::allocate(static_cast<std::size_t>(bytes), device);
  return Tensor(std::move(st), 0, shape, contiguous_strides(shape), dtype);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (device.is_cpu())
    std::memset(t.data_ptr(), 0, t.nbytes());
  else
    t.zero_();
  return t;
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

Tensor Tensor::rand(const Shape& shape, DType dtype, std::uint64_t seed) {
  return rand_slice(shape, Shape(shape.size(), 0), shape, dtype, seed);
}

Tensor Tensor::rand_slice(const Shape& global_shape, const Shape& offset, const Shape& shape,
                          DType dtype, std::uint64_t seed) {
  check_arg(global_shape.size() == offset.size() && offset.size() == shape.size(), "core",
            "rand_slice: global shape, offset and shape must have the same rank");
  for (std::size_t d = 0; d < shape.size(); ++d)
    DTENSOR_CHECK_ARG(offset[d] >= 0 && shape[d] >= 0 && shape[d] <= global_shape[d] &&
                          offset[d] <= global_shape[d] - shape[d],
                      "core", "rand_slice: box at {} of size {} does not fit in {}",
                      shape_str(offset), shape_str(shape), shape_str(global_shape));
  require_floating(dtype, "rand: dtype");  // uniform in [-1, 1): no integers
  Tensor t = empty(shape, dtype);
  const Shape gstrides = contiguous_strides(global_shape);
  // An empty box reads nothing; its offset may lie at the far end of a huge
  // global shape, where the flat offset below would overflow.
  if (t.numel() == 0) return t;
  std::int64_t goff = 0;
  for (std::size_t d = 0; d < shape.size(); ++d)
    goff += offset[d] * gstrides[d];
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* out = t.data<T>();
    detail::for_each_row(
        shape, t.strides(), 0, gstrides, goff,
        [&](std::int64_t o, std::int64_t g, std::int64_t n, std::int64_t so, std::int64_t sg) {
          for (std::int64_t k = 0; k < n; ++k)
            out[o + k * so] = convert<T>(uniform_pm1(seed, static_cast<std::uint64_t>(g + k * sg)));
        });
  });
  return t;
}

Device Tensor::device() const {
  return storage_ ? storage_->device() : Device::cpu();
}

std::int64_t Tensor::size(std::int64_t d) const {
  return shape()[normalize_dim(d, dim(), "size")];
}
std::int64_t Tensor::stride(std::int64_t d) const {
  return strides()[normalize_dim(d, dim(), "stride")];
}

bool Tensor::is_contiguous() const {
  std::int64_t expected = 1;
  for (std::size_t i = shape().size(); i-- > 0;) {
    if (shape()[i] == 1) continue;
    if (shape()[i] == 0) return true;
    if (strides()[i] != expected) return false;
    expected *= shape()[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  if (!storage_) return nullptr;
  return static_cast<char*>(storage_->data()) +
         offset_ * static_cast<std::int64_t>(dtype_size(dtype_));
}

Tensor Tensor::narrow(std::int64_t d, std::int64_t start, std::int64_t length) const {
  check_arg(defined(), "core", "narrow: undefined tensor");
  const std::int64_t dd = normalize_dim(d, dim(), "narrow");
  // start <= extent - length: start + length could overflow.
  check_arg(start >= 0 && length >= 0 && length <= shape()[dd] && start <= shape()[dd] - length,
            "core", "narrow: start {} length {} is outside dim {} of extent {}", start, length, dd,
            shape()[dd]);
  Shape s = shape();
  s[dd] = length;
  // A view with no elements addresses no memory and keeps its source's
  // offset: moved, it could point past its storage, and along the empty dims
  // of a huge shape ({0, 2^62, 2} narrowed to its ends) past 2^63 elements.
  if (length == 0 || numel() == 0)
    return Tensor(storage_, offset_, std::move(s), strides(), dtype_);
  return Tensor(storage_, offset_ + start * strides()[dd], std::move(s), strides(), dtype_);
}

Tensor Tensor::view(const Shape& shape) const {
  check_arg(defined(), "core", "view: undefined tensor");
  DTENSOR_CHECK_ARG(is_contiguous(), "core", "view: tensor of shape {} is not contiguous",
                    shape_str(this->shape()));
  for (auto e : shape)
    DTENSOR_CHECK_ARG(e >= 0, "core", "view: negative extent in shape {}", shape_str(shape));
  DTENSOR_CHECK_ARG(shape_numel(shape) == numel(), "core", "view: cannot view {} as {}",
                    shape_str(this->shape()), shape_str(shape));
  return Tensor(storage_, offset_, shape, contiguous_strides(shape), dtype_);
}

Tensor Tensor::contiguous() const {
  return is_contiguous() ? *this : clone();
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape(), dtype_, device());
  t.copy_(*this);
  return t;
}

Tensor Tensor::to(DType dtype) const {
  Tensor t = empty(shape(), dtype, device());
  t.copy_(*this);
  return t;
}

Tensor Tensor::to(Device device) const {
  check_arg(defined(), "core", "to: undefined tensor");
  if (device == this->device()) return *this;
  Tensor t = empty(shape(), dtype_, device);
  t.copy_(*this);
  return t;
}

Tensor& Tensor::copy_(const Tensor& src) {
  check_arg(defined() && src.defined(), "core", "copy_: undefined tensor");
  DTENSOR_CHECK_ARG(shape() == src.shape(), "core", "copy_: shape {} into shape {}",
                    shape_str(src.shape()), shape_str(shape()));
  if (!device().is_cpu() || !src.device().is_cpu()) {
    // At least one side is a device tensor: its backend moves the data.
    const DeviceType t = device().is_cpu() ? src.device().type : device().type;
    detail::device_ops(t, "copy_").copy(*this, src);
    return *this;
  }
  const std::size_t es = dtype_size(dtype_);
  // Any dtype to any, I64 included (a float becomes an integer as
  // static_cast truncates it, toward zero).
  visit_any_dtype(dtype_, [&](auto dtag) {
    using D = decltype(dtag);
    visit_any_dtype(src.dtype_, [&](auto stag) {
      using S = decltype(stag);
      D* dst = static_cast<D*>(storage_->data());
      const S* sp = static_cast<const S*>(src.storage_->data());
      detail::for_each_row(
          shape(), strides(), offset_, src.strides(), src.offset_,
          [&](std::int64_t o, std::int64_t so, std::int64_t n, std::int64_t sd, std::int64_t ss) {
            if constexpr (std::is_same_v<D, S>) {
              if (sd == 1 && ss == 1) {
                std::memmove(dst + o, sp + so, static_cast<std::size_t>(n) * es);
                return;
              }
            }
            for (std::int64_t k = 0; k < n; ++k)
              dst[o + k * sd] = convert<D>(sp[so + k * ss]);
          });
    });
  });
  return *this;
}

Tensor& Tensor::fill_(double value) {
  check_arg(defined(), "core", "fill_: undefined tensor");
  if (!device().is_cpu()) {
    detail::device_ops(device().type, "fill_").fill(*this, value);
    return *this;
  }
  visit_any_dtype(dtype_, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(storage_->data());
    const T v = convert<T>(value);
    // Dense runs: one memset (zero) or std::fill, not an element loop; a
    // contiguous tensor is one run, not a call per row.
    const auto dense = [&](std::int64_t o, std::int64_t n) {
      if (value == 0.0 && !std::signbit(value))
        std::memset(static_cast<void*>(p + o), 0, static_cast<std::size_t>(n) * sizeof(T));
      else
        std::fill(p + o, p + o + n, v);
    };
    if (is_contiguous()) return dense(offset_, numel());
    detail::for_each_row(
        shape(), strides(), offset_, strides(), offset_,
        [&](std::int64_t o, std::int64_t, std::int64_t n, std::int64_t s, std::int64_t) {
          if (s == 1) return dense(o, n);
          for (std::int64_t k = 0; k < n; ++k)
            p[o + k * s] = v;
        });
  });
  return *this;
}

Tensor& Tensor::add_(const Tensor& src) {
  check_arg(defined() && src.defined(), "core", "add_: undefined tensor");
  DTENSOR_CHECK_ARG(shape() == src.shape() && dtype_ == src.dtype_, "core",
                    "add_: {} {} += {} {}: shapes and dtypes must match", dtype_name(dtype_),
                    shape_str(shape()), dtype_name(src.dtype_), shape_str(src.shape()));
  DTENSOR_CHECK_ARG(device() == src.device(), "core", "add_: {} += {}: devices must match",
                    device().str(), src.device().str());
  if (!device().is_cpu()) {
    detail::device_ops(device().type, "add_").add(*this, src);
    return *this;
  }
  visit_dtype(dtype_, [&](auto tag) {
    using T = decltype(tag);
    T* dst = static_cast<T*>(storage_->data());
    const T* sp = static_cast<const T*>(src.storage_->data());
    detail::for_each_row(
        shape(), strides(), offset_, src.strides(), src.offset_,
        [&](std::int64_t o, std::int64_t so, std::int64_t n, std::int64_t sd, std::int64_t ss) {
          if constexpr (!is_half_float_v<T>) {
            if (sd == 1 && ss == 1) {  // dense rows: a loop the compiler vectorises
              T* __restrict d = dst + o;
              const T* __restrict q = sp + so;
              for (std::int64_t k = 0; k < n; ++k)
                d[k] += q[k];
              return;
            }
          }
          for (std::int64_t k = 0; k < n; ++k) {
            if constexpr (is_half_float_v<T>)
              dst[o + k * sd] =
                  T(static_cast<float>(dst[o + k * sd]) + static_cast<float>(sp[so + k * ss]));
            else
              dst[o + k * sd] += sp[so + k * ss];
          }
        });
  });
  return *this;
}

double Tensor::item(std::initializer_list<std::int64_t> index) const {
  // An undefined tensor has rank 0 and one "element" by its shape, but no storage.
  check_arg(defined(), "core", "item: undefined tensor");
  DTENSOR_CHECK_ARG(static_cast<std::int64_t>(index.size()) == dim(), "core",
                    "item: {} indices for a tensor of rank {}", index.size(), dim());
  std::int64_t off = offset_;
  std::size_t d = 0;
  for (auto i : index) {
    check_arg(i >= 0 && i < shape()[d], "core", "item: index {} out of range for dim {} ({})", i, d,
              shape()[d]);
    off += i * strides()[d++];
  }
  if (!device().is_cpu()) return device_element(off);
  return visit_any_dtype(dtype_, [&](auto tag) {
    using T = decltype(tag);
    return as_double(static_cast<const T*>(storage_->data())[off]);
  });
}

double Tensor::item_flat(std::int64_t flat) const {
  check_arg(defined(), "core", "item_flat: undefined tensor");
  DTENSOR_CHECK_ARG(flat >= 0 && flat < numel(), "core", "item_flat: index {} out of range ({})",
                    flat, numel());
  std::int64_t off = offset_;
  for (std::size_t d = shape().size(); d-- > 0;) {
    off += (flat % shape()[d]) * strides()[d];
    flat /= shape()[d];
  }
  if (!device().is_cpu()) return device_element(off);
  return visit_any_dtype(dtype_, [&](auto tag) {
    using T = decltype(tag);
    return as_double(static_cast<const T*>(storage_->data())[off]);
  });
}

double Tensor::device_element(std::int64_t storage_index) const {
  // A one-element view at that storage index, copied to the host.
  const Tensor one(storage_, storage_index, Shape{1}, Shape{1}, dtype_);
  return one.to(Device::cpu()).item_flat(0);
}

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  return fmt::format("Tensor({}, {}, {})", dtype_name(dtype_), shape_str(shape()), device().str());
}

namespace {
template <typename Fn>
void for_each_pair(const Tensor& a, const Tensor& b, Fn&& fn) {
  visit_any_dtype(a.dtype(), [&](auto at) {
    using A = decltype(at);
    visit_any_dtype(b.dtype(), [&](auto bt) {
      using B = decltype(bt);
      const A* pa = static_cast<const A*>(a.storage()->data());
      const B* pb = static_cast<const B*>(b.storage()->data());
      detail::for_each_row(
          a.shape(), a.strides(), a.storage_offset(), b.strides(), b.storage_offset(),
          [&](std::int64_t oa, std::int64_t ob, std::int64_t n, std::int64_t sa, std::int64_t sb) {
            for (std::int64_t k = 0; k < n; ++k)
              fn(as_double(pa[oa + k * sa]), as_double(pb[ob + k * sb]));
          });
    });
  });
}
}  // namespace

double max_abs_diff(const Tensor& a, const Tensor& b) {
  check_arg(a.defined() && b.defined(), "core", "max_abs_diff: undefined tensor");
  DTENSOR_CHECK_ARG(a.shape() == b.shape(), "core", "max_abs_diff: shapes {} and {} differ",
                    shape_str(a.shape()), shape_str(b.shape()));
  if (!a.device().is_cpu() || !b.device().is_cpu())
    return max_abs_diff(a.to(Device::cpu()), b.to(Device::cpu()));
  double m = 0;
  for_each_pair(a, b, [&](double x, double y) {
    const double d = std::abs(x - y);
    if (d > m || std::isnan(d)) m = std::isnan(d) ? INFINITY : d;
  });
  return m;
}

double max_abs(const Tensor& a) {
  check_arg(a.defined(), "core", "max_abs: undefined tensor");
  if (!a.device().is_cpu()) return max_abs(a.to(Device::cpu()));
  double m = 0;
  for_each_pair(a, a, [&](double x, double) { m = std::max(m, std::abs(x)); });
  return m;
}

}  // namespace dtensor
