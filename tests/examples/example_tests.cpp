// The examples, run as programs: what they print is what is checked.
//
// The training example's claim is that spatial parallelism changes nothing
// but speed: the 4-rank (2x2 mesh, H and W sharded) loss curve must match the
// one-process run step by step. Only summation order differs between them
// (tile-wise partial sums of the gradients and the loss), so f64 agrees to
// ~1e-12 and f32 to a few ulps per step; the tolerances are set accordingly.
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Output {
  int status = -1;
  std::string text;
};

// Runs a shell command, returns its exit status and stdout + stderr.
Output run(const std::string& command) {
  Output out;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0)
    out.text.append(buf, n);
  const int st = pclose(pipe);
  out.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return out;
}

std::string launch(int ranks, const std::string& program, const std::string& args = "") {
  return std::string(DTENSOR_RUN_PATH) + " -n " + std::to_string(ranks) +
         " --timeout 60 --deadline 240 -- " + program + " " + args;
}

// The losses of "step k/N loss X" lines, in step order (with or without the
// launcher's "[0] " prefix).
std::vector<double> losses(const std::string& text) {
  static const std::regex line(R"(step ([0-9]+)/[0-9]+ loss ([-+0-9.eE]+))");
  std::vector<double> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), line); it != std::sregex_iterator();
       ++it) {
    REQUIRE(std::stoul((*it)[1]) == out.size() + 1);
    out.push_back(std::stod((*it)[2]));
  }
  return out;
}

void compare_training(const std::string& dtype, double rtol) {
  const int steps = 5;
  const std::string args = "--steps " + std::to_string(steps) + " --dtype " + dtype;
  const Output parallel = run(launch(4, DTENSOR_TRAIN_CNN, args));
  INFO("4 ranks:\n" << parallel.text);
  REQUIRE(parallel.status == 0);
  const Output single = run(std::string(DTENSOR_TRAIN_CNN) + " " + args);
  INFO("1 process:\n" << single.text);
  REQUIRE(single.status == 0);

  const auto p = losses(parallel.text), s = losses(single.text);
  REQUIRE(p.size() == static_cast<std::size_t>(steps));
  REQUIRE(s.size() == static_cast<std::size_t>(steps));
  for (int k = 0; k < steps; ++k) {
    INFO("step " << k + 1 << ": 4 ranks " << p[k] << ", 1 process " << s[k]);
    CHECK(std::isfinite(p[k]));
    CHECK(std::abs(p[k] - s[k]) <= rtol * std::abs(s[k]));
  }
  // It trains: the loss goes down (the synthetic task is easy at first).
  CHECK(s.back() < s.front());
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("train_cnn: f32 loss curve on a 2x2 mesh matches one process", "[examples][mp]") {
  compare_training("f32", 1e-5);
}

TEST_CASE("train_cnn: f64 loss curve on a 2x2 mesh matches one process", "[examples][mp]") {
  compare_training("f64", 1e-11);
}

TEST_CASE("quickstart runs on 4 ranks", "[examples][mp]") {
  const Output out = run(launch(4, DTENSOR_QUICKSTART));
  INFO(out.text);
  REQUIRE(out.status == 0);
  CHECK(out.text.find("[0] y [8, 16, 64, 64]: local [8, 16, 32, 32] as S(2),S(3), "
                      "[4, 16, 64, 64] as S(0),R; mean") != std::string::npos);
}

TEST_CASE("quickstart: a store that cannot be reached ends it with the message, not an abort",
          "[examples]") {
  // Port 1 on loopback: nothing listens there, the connection is refused at once.
  const Output out = run("DTENSOR_RANK=1 DTENSOR_WORLD_SIZE=4 DTENSOR_STORE=redis://127.0.0.1:1 " +
                         std::string(DTENSOR_QUICKSTART));
  INFO(out.text);
  CHECK(out.status == 1);  // an uncaught exception was 134 (SIGABRT)
  CHECK(out.text.find("quickstart: [dtensor.store] redis://127.0.0.1:1") != std::string::npos);
}

TEST_CASE("custom_op: a strategy+kernel operator and a handler operator on 4 ranks",
          "[examples][mp]") {
  const Output out = run(launch(4, DTENSOR_CUSTOM_OP));
  INFO(out.text);
  REQUIRE(out.status == 0);
  CHECK(out.text.find(" OK") != std::string::npos);
}

TEST_CASE("unet_block: a U-Net block on a 2x2 mesh, forward and backward, equals one process",
          "[examples][mp]") {
  const Output out = run(launch(4, DTENSOR_UNET_BLOCK));
  INFO(out.text);
  REQUIRE(out.status == 0);
  CHECK(out.text.find("[0] ok: largest relative difference") != std::string::npos);
  CHECK(out.text.find("grad up.weight") != std::string::npos);
}

TEST_CASE("README's short example is examples/quickstart.cpp", "[examples]") {
  const std::string readme = read_file(DTENSOR_SOURCE_DIR "/README.md");
  const std::string code = read_file(DTENSOR_SOURCE_DIR "/examples/quickstart.cpp");
  const auto section = readme.find("## A short example");
  REQUIRE(section != std::string::npos);
  const auto begin = readme.find("```cpp\n", section);
  REQUIRE(begin != std::string::npos);
  const auto end = readme.find("```\n", begin + 7);
  REQUIRE(end != std::string::npos);
  // Compared whole, so the README cannot drift from code that compiles and runs.
  CHECK(readme.substr(begin + 7, end - begin - 7) == code);
}
