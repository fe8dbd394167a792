#include "checkpoint/collective_outcome.h"

#include <cstring>

#include "dtensor/checkpoint/checkpoint.h"

namespace dtensor::checkpoint {

namespace {

// The first byte of an outcome says what it is; the rest is the payload or the message.
constexpr char kOk = 'o', kInvalid = 'i', kCorrupt = 'c', kComm = 'm', kOther = 'e';

std::string encode(std::exception_ptr error, const std::string& payload) {
  if (!error) return std::string(1, kOk) + payload;
  try {
    std::rethrow_exception(error);
  } catch (const InvalidArgument& e) {
    return std::string(1, kInvalid) + std::string(e.what());
  } catch (const CheckpointCorrupt& e) {
    return std::string(1, kCorrupt) + std::string(e.what());
  } catch (const CommError& e) {
    return std::string(1, kComm) + std::string(e.what());
  } catch (const std::exception& e) {
    return std::string(1, kOther) + std::string(e.what());
  } catch (...) {
    return std::string(1, kOther) + std::string("unknown exception");
  }
}

[[noreturn]] void raise(char kind, const std::string& message) {
  switch (kind) {
    case kInvalid:
      throw InvalidArgument("checkpoint", message);
    case kCorrupt:
      throw CheckpointCorrupt("checkpoint", message);
    case kComm:
      throw CommError("checkpoint", message);
    default:
      throw Error("checkpoint", message);
  }
}

}  // namespace

std::vector<std::string> allgather_strings(ProcessGroup& group, const std::string& mine) {
  const int n = group.size();
  // Bytes travel packed 8 to a double: the collective only copies them.
  Tensor len = Tensor::full({1}, static_cast<double>(mine.size()), DType::F64);
  Tensor lens = Tensor::empty({n}, DType::F64);
  group.allgather(len, lens, std::vector<std::int64_t>(static_cast<std::size_t>(n), 1));
  std::vector<std::int64_t> counts;
  std::int64_t total = 0;
  for (int q = 0; q < n; ++q)
    total += counts.emplace_back((static_cast<std::int64_t>(lens.item({q})) + 7) / 8);
  Tensor in = Tensor::zeros({counts[static_cast<std::size_t>(group.rank())]}, DType::F64);
  std::memcpy(in.data_ptr(), mine.data(), mine.size());
  Tensor all = Tensor::empty({total}, DType::F64);
  group.allgather(in, all, counts);
  std::vector<std::string> out(static_cast<std::size_t>(n));
  const char* p = static_cast<const char*>(all.data_ptr());
  for (int q = 0; q < n; ++q) {
    out[q].assign(p, static_cast<std::size_t>(lens.item({q})));
    p += counts[q] * 8;
  }
  return out;
}

namespace {

// A rank's message as the re-raised error carries it: without the
// "[dtensor.checkpoint] " the re-raised error adds again, nor the "<what>: "
// it is put after. An error of another component keeps its own prefix.
std::string unprefixed(std::string message, const std::string& what) {
  for (const std::string& prefix : {std::string("[dtensor.checkpoint] "), what + ": "})
    if (message.rfind(prefix, 0) == 0) message.erase(0, prefix.size());
  return message;
}

}  // namespace

std::vector<std::string> gather_outcomes(ProcessGroup& group, std::exception_ptr error,
                                         const std::string& payload, const std::string& what) {
  auto all = allgather_strings(group, encode(error, payload));
  for (std::size_t q = 0; q < all.size(); ++q)
    if (all[q].empty() || all[q][0] != kOk)
      raise(all[q].empty() ? kOther : all[q][0],
            fmt::format("{}: rank {}: {}", what, group.global_ranks()[q],
                        unprefixed(all[q].substr(1), what)));
  for (auto& s : all)
    s.erase(0, 1);
  return all;
}

}  // namespace dtensor::checkpoint
