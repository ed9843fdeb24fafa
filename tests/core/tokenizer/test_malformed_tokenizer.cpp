// Malformed or unsupported tokenizer files are refused with messages that name the problem.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/tokenizer/tokenizer.hpp"
#include "tests/core/tokenizer/tokenizer_test_support.hpp"
#include "tests/support/temp_dir.hpp"

namespace tok = cohort::core::tokenizer;
using nlohmann::json;
using Catch::Contains;

namespace {

json valid() {
  return cohort::test::byte_level_tokenizer_json({{"a", "b"}}, {{"type", "ByteLevel"}, {"add_prefix_space", false}});
}

std::string write(const cohort::test::temp_dir& dir, const json& doc) { return dir.write("tokenizer.json", doc.dump()); }

}  // namespace

TEST_CASE("the valid base document loads (so the failures below are about their one change)", "[core][tokenizer]") {
  cohort::test::temp_dir dir;
  CHECK(tok::load_tokenizer(write(dir, valid()))->encode("ab") == std::vector<tok::token_id>{256});
}

TEST_CASE("tokenizer.json without a model is refused", "[core][tokenizer]") {
  cohort::test::temp_dir dir;
  json doc = valid();
  doc.erase("model");
  REQUIRE_THROWS_WITH(tok::load_tokenizer(write(dir, doc)), Contains("\"model\" is missing"));
}

TEST_CASE("malformed merges are refused with their index", "[core][tokenizer]") {
  cohort::test::temp_dir dir;
  json doc = valid();
  doc["model"]["merges"] = json::array({"a b", "a b c"});
  REQUIRE_THROWS_WITH(tok::load_tokenizer(write(dir, doc)), Contains("merges[1]") && Contains("one space"));
  doc["model"]["merges"] = json::array({json::array({"a", "zz"})});
  REQUIRE_THROWS_WITH(tok::load_tokenizer(write(dir, doc)), Contains("merges[0]") && Contains("\"zz\" is not in the vocab"));
  doc["model"]["merges"] = json::array({json::array({"b", "a"})});
  REQUIRE_THROWS_WITH(tok::load_tokenizer(write(dir, doc)), Contains("merged token \"ba\""));
  doc["model"]["merges"] = json::array({42});
  REQUIRE_THROWS_WITH(tok::load_tokenizer(write(dir, doc)), Contains("merges[0]"));
}

TEST_CASE("an unk_token missing from the vocab fails only the texts that need it, naming it", "[core][tokenizer]") {
  cohort::test::temp_dir dir;
  json doc = valid();
  doc["pre_tokenizer"] = nullptr;  // without ByteLevel, characters outside the byte symbols are unknown
  doc["model"]["unk_token"] = "<unk>";
  const auto t = tok::load_tokenizer(write(dir, doc));
  CHECK(t->encode("ab") == std::vector<tok::token_id>{256});
  REQUIRE_THROWS_WITH(t->encode("a\u2603"), Contains("\"<unk>\" is not either"));
}

TEST_CASE("unsupported normalizers, pre-tokenizers, decoders and models are refused by name", "[core][tokenizer]") {
  cohort::test::temp_dir dir;
  json doc = valid();
  doc["normalizer"] = {{"type", "BertNormalizer"}};
  REQUIRE_THROWS_WITH(tok::load_tokenizer(write(dir, doc)), Contains("normalizer type \"BertNormalizer\" is not supported"));
  doc = valid();
  doc["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  REQUIRE_THROWS_WITH(tok::load_tokenizer(write(dir, doc)), Contains("pre_tokenizer type \"BertPreTokenizer\""));
  doc = valid();
  doc["decoder"] = {{"type", "WordPiece"}};
  REQUIRE_THROWS_WITH(tok::load_tokenizer(write(dir, doc)), Contains("decoder type \"WordPiece\""));
  doc = valid();
  doc["model"]["type"] = "Unigram";
  REQUIRE_THROWS_WITH(tok::load_tokenizer(write(dir, doc)), Contains("model type \"Unigram\" is not supported"));
}

TEST_CASE("bad Split patterns and behaviours are refused", "[core][tokenizer]") {
  cohort::test::temp_dir dir;
  json doc = valid();
  doc["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  REQUIRE_THROWS_WITH(tok::load_tokenizer(write(dir, doc)), Contains("does not compile"));
  doc["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "x"}}}, {"behavior", "Sideways"}};
  REQUIRE_THROWS_WITH(tok::load_tokenizer(write(dir, doc)), Contains("\"Sideways\"") && Contains("Isolated"));
}

TEST_CASE("files that are not tokenizers are refused", "[core][tokenizer]") {
  cohort::test::temp_dir dir;
  REQUIRE_THROWS_WITH(tok::load_tokenizer(dir.write("tokenizer.json", "{not json")), Contains("not valid JSON"));
  REQUIRE_THROWS_WITH(tok::load_tokenizer(dir.write("tokenizer.model", "garbage")), Contains("not a sentencepiece model"));
  REQUIRE_THROWS_WITH(tok::load_tokenizer(dir.path("missing.json")), Contains("no such tokenizer file"));
  cohort::test::temp_dir empty;
  REQUIRE_THROWS_WITH(tok::load_tokenizer(empty.str()), Contains("neither tokenizer.json nor tokenizer.model"));
  json doc = valid();
  doc["model"]["vocab"]["c"] = "seven";
  REQUIRE_THROWS_WITH(tok::load_tokenizer(write(dir, doc)), Contains("\"c\"") && Contains("non-negative integers"));
  doc["model"]["vocab"]["c"] = 2000000000;
  REQUIRE_THROWS_WITH(tok::load_tokenizer(write(dir, doc)), Contains("largest id is 2000000000"));
}
