// Typed calls (dtensor/ops/typed_call.h): the encoding round-trips, every
// decoding error names the operator and the field, and one dispatch decodes
// its call once however many stages read it.
#include <catch2/catch.hpp>

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "dtensor/core/device_mesh.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/typed_call.h"
#include "tests/support/multiprocess.h"

using namespace dtensor;
using dtensor::testing::RankContext;
using dtensor::testing::run_ranks;

namespace {

// A parameter type of the test's own, two arguments wide, whose decodings
// are counted.
struct Window {
  std::int64_t size = 0;
  std::string mode;
};
std::atomic<int> window_decodes{0};

}  // namespace

template <>
struct dtensor::ArgCodec<Window> {
  using Arg = const Window&;
  static constexpr std::size_t width = 2;
  static void encode(std::vector<OpArg>& out, const Window& w) {
    out.emplace_back(w.size);
    out.emplace_back(w.mode);
  }
  static Window decode(const OpSchema& s, std::size_t at, std::string_view) {
    ++window_decodes;
    return {detail::call_arg<std::int64_t>(s, at, "size", "an int"),
            detail::call_arg<std::string>(s, at + 1, "mode", "a string")};
  }
};

namespace {

enum class Shade { Light, Dark };
std::string_view shade_name(Shade s) {
  return s == Shade::Light ? "light" : "dark";
}

}  // namespace

template <>
struct dtensor::ArgCodec<Shade>
    : dtensor::EnumByNameCodec<Shade, shade_name, Shade::Light, Shade::Dark> {};

namespace {

// A parameter struct travelling as its members.
struct Blur {
  IntList radius{1};
  std::vector<std::pair<std::int64_t, std::int64_t>> padding;
  Shade shade = Shade::Light;
  std::optional<std::int64_t> divisor;
};

}  // namespace

template <>
struct dtensor::ArgCodec<Blur>
    : dtensor::MembersCodec<Blur, dtensor::Member<&Blur::radius, "radius">,
                            dtensor::Member<&Blur::padding, "padding">,
                            dtensor::Member<&Blur::shade, "shade">,
                            dtensor::Member<&Blur::divisor, "divisor">> {};

namespace {

struct BlurCall {
  double scale;
  Blur blur;
  using Fields = CallFields<double, Blur>;
  static constexpr Fields::Names names{"scale", "blur"};
};

// A padding's pairs and an enum by name.
struct PairsCall {
  std::vector<std::pair<std::int64_t, std::int64_t>> padding;
  Shade shade;
  using Fields = CallFields<std::vector<std::pair<std::int64_t, std::int64_t>>, Shade>;
  static constexpr Fields::Names names{"padding", "shade"};
};

struct TestCall {
  const DTensor& input;
  const DTensor* other;  // optional
  double factor;
  IntList dims;
  bool flag;
  Window window;
  using Fields = CallFields<const DTensor&, const DTensor*, double, IntList, bool, Window>;
  static constexpr Fields::Names names{"input", "other", "factor", "dims", "flag", "window"};
};

std::string error_of(const OpSchema& s) {
  try {
    decoded<TestCall>(s);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

// test::typed(x, other?, factor, ...) = factor * x, every stage reading the
// typed call.
void register_typed_op() {
  OpDef def;
  def.name = "test::typed";
  def.validate = [](const OpSchema& s) {
    check_arg(decoded<TestCall>(s).factor != 0, "test", "factor: must not be 0");
  };
  def.output_meta = [](const OpSchema& s) {
    const TestCall& c = decoded<TestCall>(s);
    return std::vector<TensorMeta>{{c.input.shape(), c.input.dtype()}};
  };
  def.signatures = [](const OpSchema& s) {
    const TestCall& c = decoded<TestCall>(s);
    std::vector<ShardingSignature> sigs;
    for (std::int64_t d = 0; d < c.input.spec().ndim(); ++d)
      sigs.push_back({{Shard(d)}, {Shard(d)}});
    return sigs;
  };
  register_op(def, /*override_existing=*/true);
  register_kernel(
      "test::typed", DeviceType::CPU, DType::F64,
      [](const KernelCall& k) {
        const TestCall& c = decoded<TestCall>(k.schema);
        Tensor out = k.local(0).clone();
        for (std::int64_t i = 0; i < out.numel(); ++i)
          out.data<double>()[i] *= c.factor;
        return std::vector<Tensor>{out};
      },
      /*override_existing=*/true);
}

}  // namespace

TEST_CASE("typed calls encode, decode and name the field of a bad argument P=1", "[typed_call]") {
  run_ranks(1, [](RankContext&) {
    DeviceMesh mesh(DeviceType::CPU, {1});
    const DTensor x = distribute_tensor(Tensor::rand({3, 4}, DType::F64, 1), mesh, {Replicate()});
    const DTensor y = distribute_tensor(Tensor::rand({3, 4}, DType::F64, 2), mesh, {Replicate()});

    const std::vector<OpArg> args =
        TestCall::Fields::encode(x, &y, 2.5, IntList{0, 1}, true, Window{3, "reflect"});
    REQUIRE(args.size() == 7);
    REQUIRE(TestCall::Fields::width == 7);
    const OpSchema s("test::typed", args);
    const TestCall& c = decoded<TestCall>(s);
    REQUIRE(&c.input == &std::get<DTensor>(s.args()[0]));  // the schema's own argument
    REQUIRE(c.other == &std::get<DTensor>(s.args()[1]));
    REQUIRE(c.factor == 2.5);
    REQUIRE(c.dims == IntList{0, 1});
    REQUIRE(c.flag);
    REQUIRE(c.window.size == 3);
    REQUIRE(c.window.mode == "reflect");

    // An absent optional DTensor travels as None and comes back null.
    const OpSchema none("test::typed",
                        TestCall::Fields::encode(x, nullptr, 1.0, IntList{}, false, Window{}));
    REQUIRE(std::holds_alternative<None>(none.args()[1]));
    REQUIRE(decoded<TestCall>(none).other == nullptr);

    // Every error names the operator and the field.
    std::vector<OpArg> bad = args;
    bad[2] = std::int64_t{2};
    REQUIRE_THAT(error_of(OpSchema("test::typed", bad)),
                 Catch::Contains("test::typed: factor (argument 2) must be a double"));
    bad = args;
    bad[1] = 1.0;
    REQUIRE_THAT(error_of(OpSchema("test::typed", bad)),
                 Catch::Contains("test::typed: other (argument 1) must be a DTensor or None"));
    bad = args;
    bad[6] = std::int64_t{1};
    REQUIRE_THAT(error_of(OpSchema("test::typed", bad)),
                 Catch::Contains("test::typed: mode (argument 6) must be a string"));
    bad = args;
    bad.pop_back();
    REQUIRE_THAT(error_of(OpSchema("test::typed", bad)),
                 Catch::Contains("test::typed: 6 arguments given, 7 expected"));
  });
}

TEST_CASE(
    "typed calls carry paddings as flat pairs and enums by name, refusing odd lists and "
    "unknown names",
    "[typed_call]") {
  const auto args = PairsCall::Fields::encode({{1, 2}, {0, 3}}, Shade::Dark);
  REQUIRE(args.size() == 2);
  REQUIRE(std::get<IntList>(args[0]) == IntList{1, 2, 0, 3});
  REQUIRE(std::get<std::string>(args[1]) == "dark");
  const OpSchema s("test::pairs", args);
  const PairsCall& c = decoded<PairsCall>(s);
  REQUIRE(c.padding == std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 2}, {0, 3}});
  REQUIRE(c.shade == Shade::Dark);

  const auto error_of_pairs = [](std::vector<OpArg> a) {
    try {
      decoded<PairsCall>(OpSchema("test::pairs", std::move(a)));
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  REQUIRE_THAT(error_of_pairs({IntList{1, 2, 3}, std::string("dark")}),
               Catch::Contains("test::pairs: padding must hold (left, right) pairs"));
  REQUIRE_THAT(error_of_pairs({IntList{1, 2}, std::string("grey")}),
               Catch::Contains("test::pairs: shade: unknown value 'grey'"));
}

// A call ending in a tail of any length (a scale per spatial dim).
struct ScalesCall {
  std::int64_t count;
  ArgTail<double> scales;
  using Fields = CallFields<std::int64_t, ArgTail<double>>;
  static constexpr Fields::Names names{"count", "scales"};
};

TEST_CASE("a typed call's tail takes every remaining argument, none included, naming the field",
          "[typed_call]") {
  for (const std::vector<double>& tail :
       {std::vector<double>{}, std::vector<double>{0.5}, std::vector<double>{2.0, 0.0, 1.5}}) {
    const auto args = ScalesCall::Fields::encode(static_cast<std::int64_t>(tail.size()), tail);
    REQUIRE(args.size() == 1 + tail.size());
    const OpSchema s("test::scales", args);
    const ScalesCall& c = decoded<ScalesCall>(s);
    REQUIRE(c.count == static_cast<std::int64_t>(tail.size()));
    REQUIRE(std::vector<double>(c.scales) == tail);
  }
  try {
    decoded<ScalesCall>(OpSchema("test::scales", {std::int64_t{2}, 1.0, std::string("x")}));
    FAIL("expected an error");
  } catch (const InvalidArgument& e) {
    REQUIRE_THAT(std::string(e.what()),
                 Catch::Contains("test::scales: scales (argument 2) must be a double"));
  }
  try {
    decoded<ScalesCall>(OpSchema("test::scales", std::vector<OpArg>{}));
    FAIL("expected an error");
  } catch (const InvalidArgument& e) {
    REQUIRE_THAT(std::string(e.what()),
                 Catch::Contains("test::scales: 0 arguments given, 1 or more expected"));
  }
}

TEST_CASE("a typed call is decoded once per schema, and a copy decodes its own arguments P=1",
          "[typed_call]") {
  run_ranks(1, [](RankContext&) {
    DeviceMesh mesh(DeviceType::CPU, {1});
    const DTensor x = distribute_tensor(Tensor::rand({2, 2}, DType::F64, 3), mesh, {Replicate()});
    const OpSchema s("test::typed",
                     TestCall::Fields::encode(x, nullptr, 1.0, IntList{}, false, Window{1, "a"}));
    window_decodes = 0;
    const TestCall& first = decoded<TestCall>(s);
    const TestCall& again = decoded<TestCall>(s);
    REQUIRE(&first == &again);
    REQUIRE(window_decodes == 1);

    const OpSchema copy = s;  // NOLINT(performance-unnecessary-copy-initialization)
    const TestCall& of_copy = decoded<TestCall>(copy);
    REQUIRE(window_decodes == 2);
    REQUIRE(&of_copy.input == &std::get<DTensor>(copy.args()[0]));
    REQUIRE(&of_copy.input != &first.input);
  });
}

TEST_CASE(
    "one dispatch decodes its typed call once across validate, output_meta, signatures "
    "and the kernel P=2",
    "[typed_call][mp]") {
  run_ranks(2, [](RankContext&) {
    register_typed_op();
    DeviceMesh mesh(DeviceType::CPU, {2});
    const Tensor X = Tensor::rand({6, 3}, DType::F64, 4);
    const DTensor x = distribute_tensor(X, mesh, {Shard(0)});
    // A factor no other test uses: the first call misses the propagation
    // cache, so output_meta and the signatures read the call too.
    const auto args = TestCall::Fields::encode(x, nullptr, 3.25, IntList{}, false, Window{2, "b"});
    window_decodes = 0;
    const DTensor y = dispatch("test::typed", args).at(0);
    REQUIRE(window_decodes == 1);
    const DTensor y2 = dispatch("test::typed", args).at(0);  // a cache hit: validate, kernel
    REQUIRE(window_decodes == 2);
    const Tensor Y = y.full_tensor();
    for (std::int64_t i = 0; i < X.numel(); ++i)
      REQUIRE(Y.item_flat(i) == 3.25 * X.item_flat(i));
    REQUIRE(max_abs_diff(y2.full_tensor(), Y) == 0);
  });
}

TEST_CASE(
    "a parameter struct travels as its members, in order, each by its own codec, and a bad "
    "member is named",
    "[typed_call]") {
  STATIC_REQUIRE(ArgCodec<Blur>::width == 4);
  STATIC_REQUIRE(BlurCall::Fields::width == 5);
  Blur b;
  b.radius = {2, 3};
  b.padding = {{1, 0}, {0, 2}};
  b.shade = Shade::Dark;
  b.divisor = 7;
  const auto args = BlurCall::Fields::encode(0.5, b);
  REQUIRE(args.size() == 5);
  REQUIRE(std::get<IntList>(args[1]) == IntList{2, 3});
  REQUIRE(std::get<IntList>(args[2]) == IntList{1, 0, 0, 2});
  REQUIRE(std::get<std::string>(args[3]) == "dark");
  REQUIRE(std::get<std::int64_t>(args[4]) == 7);
  const OpSchema s("test::blur", args);
  const BlurCall& c = decoded<BlurCall>(s);
  REQUIRE(c.scale == 0.5);
  REQUIRE(c.blur.radius == b.radius);
  REQUIRE(c.blur.padding == b.padding);
  REQUIRE(c.blur.shade == Shade::Dark);
  REQUIRE(c.blur.divisor == std::optional<std::int64_t>(7));

  // An absent optional int travels as None and comes back absent.
  b.divisor.reset();
  const auto none = BlurCall::Fields::encode(0.5, b);
  REQUIRE(std::holds_alternative<None>(none[4]));
  const OpSchema s_none("test::blur", none);
  REQUIRE_FALSE(decoded<BlurCall>(s_none).blur.divisor.has_value());

  const auto error_of_blur = [&](std::size_t at, OpArg value) {
    std::vector<OpArg> bad = args;
    bad[at] = std::move(value);
    try {
      decoded<BlurCall>(OpSchema("test::blur", std::move(bad)));
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  REQUIRE_THAT(error_of_blur(1, 2.0),
               Catch::Contains("test::blur: radius (argument 1) must be an int list"));
  REQUIRE_THAT(error_of_blur(2, IntList{1}),
               Catch::Contains("test::blur: padding must hold (left, right) pairs"));
  REQUIRE_THAT(error_of_blur(3, std::string("grey")),
               Catch::Contains("test::blur: shade: unknown value 'grey'"));
  REQUIRE_THAT(error_of_blur(4, 1.5),
               Catch::Contains("test::blur: divisor (argument 4) must be an int or None"));
}
