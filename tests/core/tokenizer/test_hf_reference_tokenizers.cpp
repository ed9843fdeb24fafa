// Qwen2-style and Llama-style tokenizer.json files against the ids and decoded text that
// Hugging Face tokenizers 0.23.2 produced (tests/core/tokenizer/data, see its README).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>

#include "core/tokenizer/tokenizer.hpp"

namespace tok = cohort::core::tokenizer;

namespace {

void check_against_reference(const std::string& name) {
  const std::string dir = std::string(COHORT_TOKENIZER_TEST_DATA) + "/" + name;
  const auto t = tok::load_tokenizer(dir + "/tokenizer.json");
  std::ifstream in(dir + "/reference.json");
  REQUIRE(in);
  const auto reference = nlohmann::json::parse(in);
  REQUIRE(reference.size() >= 50);
  for (const auto& entry : reference) {
    const auto text = entry.at("text").get<std::string>();
    INFO(name << " text: " << nlohmann::json(text).dump());
    const auto ids = t->encode(text);
    CHECK(ids == entry.at("ids").get<std::vector<tok::token_id>>());
    CHECK(t->decode(ids) == entry.at("decoded").get<std::string>());
  }
}

}  // namespace

TEST_CASE("a Qwen2-style tokenizer.json encodes and decodes exactly as Hugging Face tokenizers", "[core][tokenizer]") {
  check_against_reference("qwen2-style");
}

TEST_CASE("a Llama-style tokenizer.json encodes and decodes exactly as Hugging Face tokenizers", "[core][tokenizer]") {
  check_against_reference("llama-style");
}
