// Helpers shared by the tokenizer tests (see tokenizer_test_support.hpp).
#include "tests/core/tokenizer/tokenizer_test_support.hpp"

#include "core/tokenizer/unicode.hpp"

namespace cohort::test {

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
