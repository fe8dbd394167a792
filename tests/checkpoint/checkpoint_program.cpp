// A program the checkpoint tests run under dtensor-run, so that saves and
// loads happen in real separate processes that can be killed for real.
//
//   dtensor-test-checkpoint save DIR SEED [--kill-at PHASE --kill-rank R] [--expected EXP]
//   dtensor-test-checkpoint verify DIR SEED
//
// save: saves the test tensors (seeded with SEED) on a 1-D mesh of every
// rank. With --kill-at, rank R sends itself SIGKILL at PHASE of the save
// (half-written, shard-written, index-written, index-committed). With
// --expected, rank 0 also writes each whole tensor's raw bytes to EXP/ and a
// manifest, for the Python reader that checks dtensor-ckpt's output.
// verify: loads them with other placements on however many ranks run it and
// exits 0 when every part equals the original bit for bit, 1 otherwise.
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "checkpoint/safetensors_format.h"
#include "checkpoint/save_hooks.h"
#include "dtensor/dtensor.h"

using namespace dtensor;

namespace {

struct TestTensor {
  const char* name;
  Shape shape;
  DType dtype;
  std::uint64_t seed_offset;
};

const std::vector<TestTensor> kTensors = {
    {"model.weight", {37, 300}, DType::F32, 0},  // uneven rows
    {"model.bias", {7, 5}, DType::BF16, 1},     {"model.half", {4, 6}, DType::F16, 2},
    {"model.cube", {5, 4, 3}, DType::F64, 3},   {"optim.step", {}, DType::F64, 4},  // 0-d
};

// Saved: split on dim 0 (replicated when 0-d). Verified: split on the last dim.
Placements placements_for(const TestTensor& t, bool saving) {
  if (t.shape.empty()) return {Replicate()};
  return {Shard(saving ? 0 : -1)};
}

checkpoint::SavePhase parse_phase(const std::string& s) {
  using P = checkpoint::SavePhase;
  if (s == "half-written") return P::ShardFileHalfWritten;
  if (s == "shard-written") return P::ShardFileWritten;
  if (s == "index-written") return P::IndexWritten;
  if (s == "index-committed") return P::IndexCommitted;
  throw InvalidArgument("test", "--kill-at: unknown phase " + s);
}

void write_expected(const std::string& exp, std::uint64_t seed) {
  std::filesystem::create_directories(exp);
  nlohmann::json manifest = nlohmann::json::array();
  for (const auto& t : kTensors) {
    const Tensor whole = Tensor::rand(t.shape, t.dtype, seed + t.seed_offset);
    const std::string file = std::string(t.name) + ".bin";
    std::ofstream(exp + "/" + file, std::ios::binary)
        .write(static_cast<const char*>(whole.data_ptr()),
               static_cast<std::streamsize>(whole.nbytes()));
    manifest.push_back({{"name", t.name},
                        {"dtype", checkpoint::safetensors_dtype(t.dtype)},
                        {"shape", t.shape},
                        {"file", file}});
  }
  std::ofstream(exp + "/manifest.json") << manifest.dump(1) << "\n";
}

int save(const std::string& dir, std::uint64_t seed, int argc, char** argv) {
  std::string kill_at, expected;
  int kill_rank = -1;
  for (int i = 0; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--kill-at")) kill_at = argv[i + 1];
    if (!std::strcmp(argv[i], "--kill-rank")) kill_rank = std::stoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--expected")) expected = argv[i + 1];
  }
  DeviceMesh mesh(DeviceType::CPU, {get_world_size()});
  NamedDTensors tensors;
  for (const auto& t : kTensors) {
    DTensorSpec spec(mesh, placements_for(t, true), t.shape, t.dtype);
    tensors.emplace_back(
        t.name, DTensor(Tensor::rand_slice(t.shape, spec.global_offset(), spec.local_shape(),
                                           t.dtype, seed + t.seed_offset),
                        spec));
  }
  if (!kill_at.empty() && get_rank() == kill_rank) {
    const auto phase = parse_phase(kill_at);
    checkpoint::set_save_hook([phase](checkpoint::SavePhase p) {
      if (p == phase) std::raise(SIGKILL);
    });
  }
  if (!expected.empty() && get_rank() == 0) write_expected(expected, seed);
  save_checkpoint(tensors, dir);
  return 0;
}

int verify(const std::string& dir, std::uint64_t seed) {
  DeviceMesh mesh(DeviceType::CPU, {get_world_size()});
  std::vector<CheckpointTarget> targets;
  for (const auto& t : kTensors)
    targets.push_back({t.name, DTensorSpec(mesh, placements_for(t, false), t.shape, t.dtype)});
  const auto loaded = load_checkpoint(dir, targets);
  int bad = 0;
  for (std::size_t i = 0; i < kTensors.size(); ++i) {
    const auto& spec = loaded[i].second.spec();
    const Tensor want = Tensor::rand_slice(spec.shape(), spec.global_offset(), spec.local_shape(),
                                           spec.dtype(), seed + kTensors[i].seed_offset);
    const Tensor& got = loaded[i].second.to_local();
    if (got.shape() != want.shape() ||
        std::memcmp(got.data_ptr(), want.data_ptr(), want.nbytes()) != 0) {
      std::cerr << "verify: '" << kTensors[i].name << "' differs from seed " << seed << "\n";
      ++bad;
    }
  }
  Tensor all_bad = Tensor::full({1}, bad, DType::F64);
  world()->allreduce(all_bad);
  return all_bad.item({0}) == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: dtensor-test-checkpoint save|verify DIR SEED [options]\n";
    return 2;
  }
  const std::string mode = argv[1], dir = argv[2];
  const std::uint64_t seed = std::stoull(argv[3]);
  init_process_group();
  int rc = 0;
  try {
    rc = mode == "save" ? save(dir, seed, argc - 4, argv + 4) : verify(dir, seed);
  } catch (const std::exception& e) {
    std::cerr << "dtensor-test-checkpoint: " << e.what() << "\n";
    std::_Exit(1);  // a peer may be gone: no final barrier
  }
  destroy_process_group();
  return rc;
}
