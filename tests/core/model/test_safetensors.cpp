// The safetensors reader refuses every malformed file with the file and tensor in the message;
// the streaming writer checks the bytes it is given against the header it announced.
#include "tests/support/catch_torch.hpp"

#include <cstring>
#include <filesystem>

#include "core/model/model_error.hpp"
#include "core/model/safetensors.hpp"
#include "tests/core/model/model_test_support.hpp"
#include "tests/support/temp_dir.hpp"

using namespace cohort::core::model;
using cohort::test::temp_dir;
using cohort::test::write_file;

namespace {

// A file with the given header text and `data` bytes after it.
std::string file_bytes(const std::string& header, std::size_t data, std::uint64_t claimed = 0) {
  std::string out(8, '\0');
  std::uint64_t n = claimed ? claimed : header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + header + std::string(data, '\x01');
}

std::string refusal(const std::string& path) {
  try {
    safetensors_reader r(path);
  } catch (const model_error& e) {
    CHECK(e.code() == model_errc::bad_safetensors);
    CHECK_THAT(e.what(), Catch::Contains(path));
    return e.what();
  }
  FAIL("file was accepted: " << path);
  return "";
}

}  // namespace

TEST_CASE("safetensors written and read back keep names, shapes, dtypes and bytes", "[core][model]") {
  temp_dir dir;
  const float a[6] = {1, 2, 3, 4, 5, 6};
  const std::uint16_t b[3] = {0x3f80, 0x4000, 0xc040};
  write_safetensors(dir.path("m.safetensors"), {{"w.a", "F32", {2, 3}, a, sizeof a},
                                                {"w.b", "BF16", {3}, b, sizeof b}});
  safetensors_reader r(dir.path("m.safetensors"));
  REQUIRE(r.tensors().size() == 2);
  CHECK(r.metadata().at("format") == "pt");
  const auto& ea = r.at("w.a");
  CHECK(ea.dtype == "F32");
  CHECK(ea.shape == std::vector<std::int64_t>{2, 3});
  float back[6];
  r.read(ea, back);
  CHECK(std::memcmp(back, a, sizeof a) == 0);
  std::uint16_t bb[3];
  r.read(r.at("w.b"), bb);
  CHECK(std::memcmp(bb, b, sizeof b) == 0);
}

TEST_CASE("malformed safetensors headers are refused naming the file and tensor", "[core][model]") {
  temp_dir dir;
  const std::string p = dir.path("bad.safetensors");

  write_file(p, "abc");
  CHECK_THAT(refusal(p), Catch::Contains("too short"));

  write_file(p, file_bytes("{}", 0, 1000));
  CHECK_THAT(refusal(p), Catch::Contains("bad header length 1000"));

  write_file(p, file_bytes("not json", 0));
  CHECK_THAT(refusal(p), Catch::Contains("not a JSON object"));

  write_file(p, file_bytes("[1, 2]", 0));
  CHECK_THAT(refusal(p), Catch::Contains("not a JSON object"));

  write_file(p, file_bytes(R"({"w": {"dtype": "F99", "shape": [1], "data_offsets": [0, 4]}})", 4));
  CHECK_THAT(refusal(p), Catch::Contains("tensor 'w'") && Catch::Contains("unknown dtype 'F99'"));

  write_file(p, file_bytes(R"({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}})", 12));
  CHECK_THAT(refusal(p), Catch::Contains("tensor 'w'") && Catch::Contains("need 16"));

  write_file(p, file_bytes(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 4));
  CHECK_THAT(refusal(p), Catch::Contains("tensor 'w'") && Catch::Contains("run past"));

  write_file(p, file_bytes(R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", 8));
  CHECK_THAT(refusal(p), Catch::Contains("tensor 'w'") && Catch::Contains("begin after"));

  write_file(p, file_bytes(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                               "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12));
  CHECK_THAT(refusal(p), Catch::Contains("overlaps") && Catch::Contains("'a'") && Catch::Contains("'b'"));

  write_file(p, file_bytes(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4));
  CHECK_THAT(refusal(p), Catch::Contains("tensor 'w'") && Catch::Contains("non-negative"));

  write_file(p, file_bytes(R"({"w": {"dtype": "F32", "shape": [1]}})", 4));
  CHECK_THAT(refusal(p), Catch::Contains("tensor 'w'") && Catch::Contains("data_offsets"));

  write_file(p, file_bytes(R"({"__metadata__": {"format": 1}})", 0));
  CHECK_THAT(refusal(p), Catch::Contains("__metadata__"));
}

TEST_CASE("asking a safetensors file for a tensor it lacks names file and tensor", "[core][model]") {
  temp_dir dir;
  const float a[1] = {1};
  write_safetensors(dir.path("m.safetensors"), {{"present", "F32", {1}, a, sizeof a}});
  safetensors_reader r(dir.path("m.safetensors"));
  CHECK(r.find("absent") == nullptr);
  try {
    r.at("absent");
    FAIL("no error");
  } catch (const model_error& e) {
    CHECK(e.code() == model_errc::bad_weights);
    CHECK_THAT(e.what(), Catch::Contains(dir.path("m.safetensors")) && Catch::Contains("'absent'"));
  }
  CHECK_THROWS_AS(safetensors_reader(dir.path("nope.safetensors")), model_error);
}

TEST_CASE("a streamed safetensors file takes tensors in pieces and appears only when finished",
          "[core][model]") {
  temp_dir dir;
  const std::string path = dir.path("s.safetensors");
  const float a[4] = {1, 2, 3, 4};
  const std::uint16_t b[2] = {0x3f80, 0x4000};
  {
    safetensors_writer w(path, {{"a", "F32", {2, 2}, sizeof a}, {"b", "BF16", {2}, sizeof b}});
    w.write(a, 8);
    w.write(a + 2, 8);
    w.write(b, sizeof b);
    CHECK_FALSE(std::filesystem::exists(path));
    CHECK(std::filesystem::exists(path + ".tmp"));
    w.finish();
    CHECK(w.file_bytes() == std::filesystem::file_size(path));
  }
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  // The header is the one write_safetensors writes for the same tensors.
  write_safetensors(dir.path("w.safetensors"), {{"a", "F32", {2, 2}, a, sizeof a}, {"b", "BF16", {2}, b, sizeof b}});
  CHECK(cohort::test::read_file(path) == cohort::test::read_file(dir.path("w.safetensors")));
  safetensors_reader r(path);
  float back[4];
  r.read(r.at("a"), back);
  CHECK(std::memcmp(back, a, sizeof a) == 0);
}

TEST_CASE("a streamed safetensors file refuses bytes beyond or short of its header", "[core][model]") {
  temp_dir dir;
  const std::string path = dir.path("s.safetensors");
  const float a[3] = {1, 2, 3};
  {
    safetensors_writer w(path, {{"a", "F32", {2}, 8}});
    CHECK_THROWS_WITH(w.write(a, 12), Catch::Contains("12 data bytes") && Catch::Contains("announced 8"));
    w.write(a, 4);
    CHECK_THROWS_WITH(w.finish(), Catch::Contains("only 4 of the 8"));
  }
  CHECK_FALSE(std::filesystem::exists(path));
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));  // an unfinished writer cleans up
  CHECK_THROWS_WITH(safetensors_writer(path, {{"a", "F32", {1}, 4}, {"a", "F32", {1}, 4}}),
                    Catch::Contains("'a' given twice"));
  CHECK_THROWS_AS(safetensors_writer(dir.path("no/such/dir/x.safetensors"), {}), model_error);
}
