// The one table of dtensor-op's operators: a row per OP with everything the
// tool does differently for it (the options it accepts, its rules, its
// output shape, its report line and meta.json fields, the library calls of
// its forward and backward, and its oracle). main, the parser, the problem
// builder, --check and --dump are generic and read the row; adding an
// operator to the tool is adding a row to one of the family files
// (tools/dtensor-op/entries/*.cpp) and, for a new family, the list here.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/dtensor-op/check.h"
#include "tools/dtensor-op/options.h"
#include "tools/dtensor-op/problem.h"

namespace dtensor::op_cli {

/// Which operands beyond the input the operator takes a weight for.
enum class WeightKind { None, Always, WhenAffine };

/// An option of its row alone, declared with the row instead of in Options:
/// the parser accepts it for the rows that declare it and keeps its text in
/// Options::declared; the row's own functions read it
/// (entries/declared_options.h) and check it in `check`; the help lists it
/// under the row's heading.
struct DeclaredOption {
  std::string_view name;   // "--norm-type"
  std::string_view value;  // "p" in the help; empty: a flag
  std::string_view help;
};

struct OpEntry {
  OpEntry(OpKind k, std::string_view n, Family f) : kind(k), name(n), family(f) {}
  /// A row registered from its own file (OpRegistration): the table gives it
  /// its OpKind, past the built-in ones.
  OpEntry(std::string_view n, Family f) : OpEntry(OpKind{}, n, f) {}

  OpKind kind;
  std::string_view name;  // the OP argument's spelling
  Family family;
  /// The operator-specific options it accepts (an option given to an op
  /// whose row does not list it is a usage error naming it).
  std::vector<std::string_view> options;
  /// Its own options (the table adds their names to `options`), and the
  /// help's heading above them.
  std::vector<DeclaredOption> declared_options;
  std::string_view help_heading;
  WeightKind weight = WeightKind::None;
  /// The input is drawn in [0.5, 1.5) (log, sqrt, rsqrt, pow).
  bool positive_input = false;
  OpEntry&& with_positive_input(bool positive) && {
    positive_input = positive;
    return std::move(*this);
  }
  /// The input needs a spatial dim (N, C, L...); otherwise N, C is enough.
  bool needs_spatial = false;
  /// --stride defaults to --kernel (the pools), not to 1.
  bool stride_defaults_to_kernel = false;

  /// PyTorch's rules on the resolved options (this tool's own arithmetic):
  /// throws UsageError naming the option. `padding_option` is the padding
  /// option the user gave ("--padding" or "--padding-lr").
  void (*check)(const Options&, const std::string& padding_option) = nullptr;
  /// The library's own argument checks run before any rank talks (throwing
  /// InvalidArgument, reported as a usage error).
  void (*check_with_library)(const Options&) = nullptr;
  /// The global output shape; nullptr: the input's.
  Shape (*output_shape)(const Options&) = nullptr;
  /// The parameters in one line of the report.
  std::string (*params_line)(const Options&) = nullptr;
  /// meta.json's fields for the op, in order, after the common ones.
  void (*meta)(nlohmann::ordered_json&, const Options&) = nullptr;

  /// Losses: the whole target from the seeds, and its placements given the
  /// input's (nullptr: the input's).
  Tensor (*whole_target)(const Options&, const Seeds&) = nullptr;
  Placements (*target_placements)(const Options&, const Placements&) = nullptr;

  /// The library's forward and backward of the op (the losses' backward
  /// gets no grad_output: the gradient of the loss is 1).
  Forward (*forward)(const Options&, const Operands&) = nullptr;
  Grads (*backward)(const Options&, const Operands&, const std::optional<DTensor>&) = nullptr;
  /// --check: appends the comparison of each result with the oracle's.
  void (*reference)(const Options&, const GlobalTensors&, int ranks,
                    std::vector<TensorCheck>&) = nullptr;
};

/// Every row, in the order the help and the messages list the operators.
std::span<const OpEntry> op_table();
const OpEntry& op_entry(OpKind op);
/// The row spelled `name`, or nullptr.
const OpEntry* find_op(std::string_view name);

/// Adds a row to the table from the row's own file, with nothing else to
/// edit: `const OpRegistration row{lp_pool_entry};` at namespace scope of
/// tools/dtensor-op/entries/NAME_entry.cpp. Registered rows follow the
/// built-in ones, by name; the table gives each the next OpKind.
struct OpRegistration {
  explicit OpRegistration(OpEntry (*row)());
};

// The family files' rows (tools/dtensor-op/entries/*.cpp); op_table() puts
// them in OpKind's order.
std::vector<OpEntry> window_entries();      // conv .. pad
std::vector<OpEntry> unet_entries();        // upsample, norms, cat, activations, dropout, linear
std::vector<OpEntry> loss_entries();        // mse_loss, cross_entropy and the pointwise losses
std::vector<OpEntry> tensor_api_entries();  // binary, unary, reductions, softmax
std::vector<OpEntry> view_entries();        // reshape .. narrow

}  // namespace dtensor::op_cli
