#include "tests/core/tokenizer/tokenizer_test_support.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/tokenizer/unicode.hpp"

namespace cohort::test {

std::string shared_file(const std::string& relative) {
  const char* shared = std::getenv("COHORT_SHARED");
  if (shared == nullptr) FAIL("COHORT_SHARED is not set; run the test through ctest or export it (/work/shared)");
  const std::string path = std::string(shared) + "/" + relative;
  if (!std::filesystem::exists(path)) FAIL("missing shared fixture " << path);
  return path;
}

scratch_dir::scratch_dir() {
  std::random_device rd;
  const auto base = std::filesystem::temp_directory_path();
  for (;;) {
    const auto candidate = base / ("cohort-tok-" + std::to_string(rd()));
    if (std::filesystem::create_directory(candidate)) {
      path_ = candidate.string();
      return;
    }
  }
}

scratch_dir::~scratch_dir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string scratch_dir::write(const std::string& name, const std::string& content) const {
  const std::string file = path_ + "/" + name;
  std::ofstream out(file, std::ios::binary);
  out << content;
  out.close();
  if (!out) FAIL("cannot write " << file);
  return file;
}

std::string byte_symbol(unsigned char b) { return core::tokenizer::byte_to_unicode()[b]; }

nlohmann::json byte_level_tokenizer_json(const std::vector<std::pair<std::string, std::string>>& merges,
                                         const nlohmann::json& pre_tokenizer, const nlohmann::json& added_tokens) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_symbol(static_cast<unsigned char>(b))] = b;
  nlohmann::json merge_list = nlohmann::json::array();
  int next = 256;
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = next++;
    merge_list.push_back({a, b});
  }
  return {{"version", "1.0"},
          {"added_tokens", added_tokens},
          {"normalizer", nullptr},
          {"pre_tokenizer", pre_tokenizer},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}}},
          {"decoder", {{"type", "ByteLevel"}}}};
}

}  // namespace cohort::test
