// read_safetensors / write_safetensors on one process. The reader is checked
// against files assembled byte by byte here, the writer against its bytes read
// back by hand (JSON parsed with nlohmann directly, data compared raw), and
// every kind of damage is named: the file, the tensor, what is wrong.
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "dtensor/dtensor.h"
#include "dtensor/testing.h"

using namespace dtensor;
using Catch::Matchers::Contains;

namespace {

// A fresh directory, removed at the end.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "dtensor-st-XXXXXX").string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string little_endian_u64(std::uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i)
    s[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// A safetensors file from a header text and raw data, as any writer would make it.
void write_raw(const std::string& path, const std::string& header, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  out << little_endian_u64(header.size()) << header << data;
}

std::string bytes_of(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}
std::string bytes_of(const std::vector<double>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(double));
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("safetensors: a file assembled by hand reads back, metadata skipped, any data order",
          "[checkpoint][safetensors]") {
  TempDir dir;
  // "b" lies before "a" in the data; a 0-d and an empty tensor too.
  const std::vector<float> a{1, 2, 3, 4, 5, 6};
  const std::vector<double> b{-1.5, 2.25};
  const std::vector<double> scalar{7};
  const std::string data = bytes_of(b) + bytes_of(a) + bytes_of(scalar);
  const std::string header = R"({"__metadata__":{"format":"pt"},)"
                             R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[16,40]},)"
                             R"("b":{"dtype":"F64","shape":[2],"data_offsets":[0,16]},)"
                             R"("s":{"dtype":"F64","shape":[],"data_offsets":[40,48]},)"
                             R"("e":{"dtype":"BF16","shape":[0,5],"data_offsets":[48,48]}})";
  write_raw(dir / "m.safetensors", header, data);
  const auto t = read_safetensors(dir / "m.safetensors");
  REQUIRE(t.size() == 4);
  CHECK(t.at("a").shape() == Shape{2, 3});
  CHECK(t.at("a").dtype() == DType::F32);
  for (int i = 0; i < 6; ++i)
    CHECK(t.at("a").data<float>()[i] == a[static_cast<std::size_t>(i)]);
  CHECK(t.at("b").data<double>()[1] == 2.25);
  CHECK(t.at("s").dim() == 0);
  CHECK(t.at("s").data<double>()[0] == 7.0);
  CHECK(t.at("e").shape() == Shape{0, 5});
  CHECK(t.at("e").dtype() == DType::BF16);
}

TEST_CASE("safetensors: write_safetensors lays out what the format says, and reads back",
          "[checkpoint][safetensors]") {
  TempDir dir;
  Tensor wide = Tensor::rand({3, 4}, DType::F64, 5);
  std::map<std::string, Tensor> tensors{{"w", wide.narrow(1, 1, 2)},  // not contiguous
                                        {"h", Tensor::rand({5}, DType::F32, 6).to(DType::BF16)},
                                        {"z", Tensor::zeros({0}, DType::F16)}};
  write_safetensors(dir / "out.safetensors", tensors);
  const std::string file = slurp(dir / "out.safetensors");
  std::uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  REQUIRE(8 + n <= file.size());
  CHECK((8 + n) % 8 == 0);  // the data starts 8-byte aligned
  const auto header = nlohmann::json::parse(file.substr(8, n));
  // Every tensor's bytes where its offsets say, row-major.
  const Tensor w = tensors.at("w").contiguous();
  const auto off = header.at("w").at("data_offsets").get<std::vector<std::size_t>>();
  CHECK(header.at("w").at("dtype") == "F64");
  CHECK(header.at("w").at("shape").get<Shape>() == Shape{3, 2});
  REQUIRE(off[1] - off[0] == w.nbytes());
  CHECK(std::memcmp(file.data() + 8 + n + off[0], w.data_ptr(), w.nbytes()) == 0);
  CHECK(header.at("h").at("dtype") == "BF16");
  CHECK(header.at("z").at("dtype") == "F16");
  CHECK(file.size() == 8 + n + w.nbytes() + 5 * 2);
  // And back through the reader.
  const auto back = read_safetensors(dir / "out.safetensors");
  REQUIRE(back.size() == 3);
  CHECK(max_abs_diff(back.at("w"), tensors.at("w")) == 0.0);
  CHECK(max_abs_diff(back.at("h"), tensors.at("h")) == 0.0);
  CHECK(back.at("z").numel() == 0);
}

TEST_CASE("safetensors: damage is named, with the file and the tensor",
          "[checkpoint][safetensors]") {
  TempDir dir;
  const std::string path = dir / "bad.safetensors";
  const std::vector<float> a{1, 2, 3, 4};
  const std::string good = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  auto expect_corrupt = [&](const std::string& why) {
    CHECK_THROWS_MATCHES(read_safetensors(path), CheckpointCorrupt,
                         Catch::Matchers::Predicate<CheckpointCorrupt>(
                             [&](const CheckpointCorrupt& e) {
                               const std::string m = e.what();
                               return m.find(path) != std::string::npos &&
                                      m.find(why) != std::string::npos;
                             },
                             "names " + path + " and '" + why + "'"));
  };
  SECTION("missing") {
    CHECK_THROWS_MATCHES(read_safetensors(dir / "none"), InvalidArgument,
                         Catch::Matchers::Predicate<InvalidArgument>([&](const InvalidArgument& e) {
                           return std::string(e.what()).find("cannot open") != std::string::npos;
                         }));
  }
  SECTION("shorter than its length prefix") {
    std::ofstream(path, std::ios::binary) << "abc";
    expect_corrupt("3 bytes: not a safetensors file");
  }
  SECTION("a header past the end") {
    std::ofstream(path, std::ios::binary) << little_endian_u64(1000) << good;
    expect_corrupt("runs past the end of the file");
  }
  SECTION("a header that is not JSON") {
    write_raw(path, "{\"a\": [", bytes_of(a));
    expect_corrupt("the header is not a JSON object");
  }
  SECTION("truncated data") {
    write_raw(path, good, bytes_of(a).substr(0, 12));
    expect_corrupt("tensor 'a': data_offsets [0, 16) lie outside the 12 bytes of data");
  }
  SECTION("offsets that do not match the shape") {
    write_raw(path, R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", bytes_of(a));
    expect_corrupt("tensor 'a': 16 bytes of data for shape [3] of f32 (12 expected)");
  }
  SECTION("a shape far larger than the file") {
    write_raw(path,
              R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,16]}})",
              bytes_of(a));
    expect_corrupt("tensor 'a'");
  }
  SECTION("an entry without offsets") {
    write_raw(path, R"({"a":{"dtype":"F32","shape":[4]}})", bytes_of(a));
    expect_corrupt("tensor 'a' lacks dtype, shape or data_offsets");
  }
  SECTION("a dtype libdtensor does not have") {
    write_raw(path, R"({"a":{"dtype":"I32","shape":[4],"data_offsets":[0,16]}})", bytes_of(a));
    CHECK_THROWS_AS(read_safetensors(path), InvalidArgument);
    CHECK_THROWS_WITH(read_safetensors(path), Contains("tensor 'a': dtype 'I32'"));
  }
}
