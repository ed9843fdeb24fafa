// T5's tokenizer (a sentencepiece Unigram model with nmt_nfkc normalization) as tokenizer.json and
// as spiece.model, against what transformers 5.17, Hugging Face tokenizers 0.23.2 and
// sentencepiece produced for it (tests/core/tokenizer/data/t5-unigram, see the README there).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>

#include "core/tokenizer/hf_tokenizer.hpp"
#include "core/tokenizer/normalizer.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "tests/support/files.hpp"
#include "tests/support/temp_dir.hpp"

namespace tok = cohort::core::tokenizer;
using ids = std::vector<tok::token_id>;

namespace {

const std::string dir = std::string(COHORT_TOKENIZER_TEST_DATA) + "/t5-unigram";

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in);
  return nlohmann::json::parse(in);
}

nlohmann::json expected_cases() {
  const auto cases = read_json(dir + "/expected.json").at("cases");
  REQUIRE(cases.size() >= 14);
  return cases;
}

}  // namespace

TEST_CASE("T5's tokenizer.json gives transformers' ids, with and without </s>, its tokens and its decoded text",
          "[core][tokenizer]") {
  const tok::hf_tokenizer t(dir + "/tokenizer.json");
  for (const auto& c : expected_cases()) {
    const auto text = c.at("text").get<std::string>();
    INFO("text: " << nlohmann::json(text).dump());
    CHECK(t.encode(text) == c.at("ids_no_special").get<ids>());
    const auto with_eos = t.encode_with_special_tokens(text);
    CHECK(with_eos == c.at("ids").get<ids>());
    const auto tokens = c.at("tokens").get<std::vector<std::string>>();
    REQUIRE(tokens.size() == with_eos.size());
    for (std::size_t i = 0; i < tokens.size(); ++i) CHECK(t.token_to_id(tokens[i]) == with_eos[i]);
    CHECK(t.decode(with_eos, true) == c.at("decoded").get<std::string>());
  }
}

TEST_CASE("T5's tokenizer.json encodes and decodes tricky texts exactly as Hugging Face tokenizers",
          "[core][tokenizer]") {
  const auto t = tok::load_tokenizer(dir);  // the directory: tokenizer.json is preferred
  const auto reference = read_json(dir + "/reference.json");
  REQUIRE(reference.size() >= 100);
  for (const auto& entry : reference) {
    const auto text = entry.at("text").get<std::string>();
    INFO("text: " << nlohmann::json(text).dump());
    const auto got = t->encode(text);
    CHECK(got == entry.at("ids").get<ids>());
    CHECK(t->decode(got) == entry.at("decoded").get<std::string>());
  }
}

TEST_CASE("T5's tokenizer.json has transformers' special tokens and vocabulary size", "[core][tokenizer]") {
  const auto t = tok::load_tokenizer(dir + "/tokenizer.json");
  CHECK(t->vocab_size() == 410);  // 400 pieces and 10 extra ids
  CHECK(t->eos_id() == std::optional<tok::token_id>(1));
  CHECK(t->pad_id() == std::optional<tok::token_id>(0));
  CHECK_FALSE(t->bos_id().has_value());
  CHECK(t->token_to_id("<extra_id_0>") == std::optional<tok::token_id>(409));
  CHECK(t->token_to_id("<extra_id_9>") == std::optional<tok::token_id>(400));
  CHECK(t->identity().rfind("hf-unigram:", 0) == 0);
}

TEST_CASE("T5's spiece.model loads through libsentencepiece and gives sentencepiece's own ids", "[core][tokenizer]") {
  const auto t = tok::load_tokenizer(dir + "/spiece.model");
  CHECK(t->identity().rfind("sentencepiece:", 0) == 0);
  CHECK(t->eos_id() == std::optional<tok::token_id>(1));
  CHECK(t->pad_id() == std::optional<tok::token_id>(0));
  CHECK(t->vocab_size() == 400);
  for (const auto& c : expected_cases()) {
    const auto text = c.at("text").get<std::string>();
    INFO("text: " << nlohmann::json(text).dump());
    CHECK(t->encode(text) == c.at("sentencepiece_ids").get<ids>());
  }
}

TEST_CASE("a model directory with only spiece.model loads it through libsentencepiece", "[core][tokenizer]") {
  cohort::test::temp_dir tmp;
  tmp.write("spiece.model", cohort::test::read_file(dir + "/spiece.model"));
  const auto t = tok::load_tokenizer(tmp.str());
  CHECK(t->identity().rfind("sentencepiece:", 0) == 0);
  CHECK(t->encode("Hello world.") == ids{159, 77, 10, 164, 20, 7, 13});
}

TEST_CASE("the Precompiled normalizer applies nmt_nfkc by grapheme, as Hugging Face does", "[core][tokenizer]") {
  const auto doc = read_json(dir + "/tokenizer.json");
  const auto n = tok::make_normalizer(doc.at("normalizer"), "t5 tokenizer.json");
  REQUIRE(n);
  CHECK(n->apply("plain ascii stays") == "plain ascii stays");
  CHECK(n->apply("\xEF\xBC\xA1\xEF\xBC\xA2 \xEF\xAC\x81ne") == "AB fine");              // full-width, ligature
  CHECK(n->apply("e\xCC\x81") == "\xC3\xA9");                                              // e + acute composes
  CHECK(n->apply("\xEF\xBC\xA1\xCC\x81") == "A");  // the shortest rule of a short cluster wins; the acute is dropped
  CHECK(n->apply("\xEF\xBC\xA1\xCC\x81\xCC\x81") == "A\xCC\x81\xCC\x81");  // 7 bytes: character by character
  CHECK(n->apply("tab\there") != "tab\there");
}
