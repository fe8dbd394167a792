#include "tools/dtensor-op/op_table.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace dtensor::op_cli {
namespace {

// The rows registered from their own files (OpRegistration), filled while
// static objects are constructed, before main.
std::vector<OpEntry (*)()>& registered_rows() {
  static std::vector<OpEntry (*)()> rows;
  return rows;
}

// Whether a row has what every run calls.
bool complete(const OpEntry& e) {
  return e.forward && e.backward && e.reference && e.params_line;
}

// The family files' rows in OpKind's order; every OpKind has exactly one.
// Then the registered rows, by name, with the kinds that follow.
std::vector<OpEntry> build_table() {
  std::vector<OpEntry> all;
  for (auto* family :
       {window_entries, unet_entries, loss_entries, tensor_api_entries, view_entries})
    for (auto& e : family())
      all.push_back(std::move(e));
  std::sort(all.begin(), all.end(), [](const OpEntry& a, const OpEntry& b) {
    return static_cast<int>(a.kind) < static_cast<int>(b.kind);
  });
  if (all.empty() || all.back().kind != OpKind::Linear)
    throw std::logic_error("dtensor-op: the op table does not end with linear, OpKind's last");
  for (std::size_t i = 0; i < all.size(); ++i)
    if (static_cast<std::size_t>(all[i].kind) != i || !complete(all[i]))
      throw std::logic_error(fmt::format(
          "dtensor-op: the op table's row {} ('{}') is missing or incomplete", i, all[i].name));
  std::vector<OpEntry> added;
  for (auto* row : registered_rows())
    added.push_back(row());
  std::sort(added.begin(), added.end(),
            [](const OpEntry& a, const OpEntry& b) { return a.name < b.name; });
  for (OpEntry& e : added) {
    for (const OpEntry& other : all)
      if (other.name == e.name)
        throw std::logic_error(fmt::format("dtensor-op: two rows are named '{}'", e.name));
    if (!complete(e))
      throw std::logic_error(
          fmt::format("dtensor-op: the registered row '{}' is incomplete", e.name));
    e.kind = static_cast<OpKind>(all.size());
    all.push_back(std::move(e));
  }
  // A declared option is one of its row's options (checked against the
  // other rows like them).
  for (OpEntry& e : all)
    for (const DeclaredOption& d : e.declared_options)
      e.options.push_back(d.name);
  return all;
}

}  // namespace

std::span<const OpEntry> op_table() {
  static const std::vector<OpEntry> table = build_table();
  return table;
}

const OpEntry& op_entry(OpKind op) {
  return op_table()[static_cast<std::size_t>(op)];
}

OpRegistration::OpRegistration(OpEntry (*row)()) {
  registered_rows().push_back(row);
}

const OpEntry* find_op(std::string_view name) {
  for (const OpEntry& e : op_table())
    if (e.name == name) return &e;
  return nullptr;
}

}  // namespace dtensor::op_cli
