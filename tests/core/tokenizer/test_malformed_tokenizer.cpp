// Malformed or unsupported tokenizer files are refused with messages that name the problem.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <sodium.h>

#include <fstream>

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

// T5's tokenizer.json from the test data (a Unigram model with a Precompiled normalizer).
json t5_document() {
  std::ifstream in(std::string(COHORT_TOKENIZER_TEST_DATA) + "/t5-unigram/tokenizer.json");
  REQUIRE(in);
  return json::parse(in);
}

std::string base64(const std::string& bytes) {
  std::string out(sodium_base64_ENCODED_LEN(bytes.size(), sodium_base64_VARIANT_ORIGINAL), '\0');
  sodium_bin2base64(out.data(), out.size(), reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
                    sodium_base64_VARIANT_ORIGINAL);
  out.pop_back();  // the terminating NUL
  return out;
}

std::string unbase64(const std::string& text) {
  std::string out(text.size(), '\0');
  std::size_t length = 0;
  REQUIRE(sodium_base642bin(reinterpret_cast<unsigned char*>(out.data()), out.size(), text.data(), text.size(), nullptr,
                            &length, nullptr, sodium_base64_VARIANT_ORIGINAL) == 0);
  out.resize(length);
  return out;
}

std::string le32(std::uint32_t v) {
  std::string out(4, '\0');
  for (int i = 0; i < 4; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return out;
}

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
  doc["model"]["type"] = "WordPiece";
  REQUIRE_THROWS_WITH(tok::load_tokenizer(write(dir, doc)),
                      Contains("model type \"WordPiece\" is not supported (supported: BPE, Unigram)"));
  doc = valid();
  doc["post_processor"] = {{"type", "NewProcessing"}};
  REQUIRE_THROWS_WITH(tok::load_tokenizer(write(dir, doc)), Contains("post_processor type \"NewProcessing\""));
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

TEST_CASE("a Unigram model without a usable vocab or unk_id is refused naming the field", "[core][tokenizer]") {
  cohort::test::temp_dir dir;
  json doc = t5_document();
  const std::string path = dir.path("tokenizer.json");
  CHECK(tok::load_tokenizer(write(dir, doc))->encode("a") == std::vector<tok::token_id>{28});
  doc["model"].erase("vocab");
  REQUIRE_THROWS_WITH(tok::load_tokenizer(write(dir, doc)), Contains(path + " model") && Contains("\"vocab\" is missing"));
  doc["model"]["vocab"] = json::array();
  REQUIRE_THROWS_WITH(tok::load_tokenizer(write(dir, doc)), Contains("\"vocab\" is empty"));
  doc = t5_document();
  doc["model"]["vocab"][5] = json::array({"x", "high"});
  REQUIRE_THROWS_WITH(tok::load_tokenizer(write(dir, doc)), Contains("vocab[5]") && Contains("[piece, score]"));
  doc = t5_document();
  doc["model"]["vocab"][6] = doc["model"]["vocab"][5];
  REQUIRE_THROWS_WITH(tok::load_tokenizer(write(dir, doc)), Contains("vocab[6]") && Contains("already vocab[5]"));
  doc = t5_document();
  doc["model"]["unk_id"] = 410;
  REQUIRE_THROWS_WITH(tok::load_tokenizer(write(dir, doc)),
                      Contains(path) && Contains("\"unk_id\" is 410") && Contains("(0..409)"));
  doc["model"]["unk_id"] = "<unk>";
  REQUIRE_THROWS_WITH(tok::load_tokenizer(write(dir, doc)), Contains("\"unk_id\" is \"<unk>\""));
}

TEST_CASE("a Precompiled normalizer with a bad or cut precompiled_charsmap is refused naming the field",
          "[core][tokenizer]") {
  cohort::test::temp_dir dir;
  json doc = t5_document();
  const std::string path = dir.path("tokenizer.json");
  const std::string charsmap = unbase64(doc["normalizer"]["precompiled_charsmap"].get<std::string>());
  doc["normalizer"]["precompiled_charsmap"] = "not base64!";
  REQUIRE_THROWS_WITH(tok::load_tokenizer(write(dir, doc)),
                      Contains(path + " normalizer Precompiled") && Contains("\"precompiled_charsmap\" is not valid base64"));
  doc["normalizer"]["precompiled_charsmap"] = base64(charsmap.substr(0, 1000));  // the trie cut short
  REQUIRE_THROWS_WITH(tok::load_tokenizer(write(dir, doc)),
                      Contains(path + " normalizer Precompiled precompiled_charsmap: truncated") && Contains("only 996 follow"));
  doc["normalizer"]["precompiled_charsmap"] = base64("ab");
  REQUIRE_THROWS_WITH(tok::load_tokenizer(write(dir, doc)), Contains("too short"));
  doc["normalizer"]["precompiled_charsmap"] = base64(le32(6) + "abcdef");
  REQUIRE_THROWS_WITH(tok::load_tokenizer(write(dir, doc)), Contains("multiple of 4"));
  doc["normalizer"]["precompiled_charsmap"] = base64(le32(4) + le32(1000u << 10));  // root's children past the end
  REQUIRE_THROWS_WITH(tok::load_tokenizer(write(dir, doc)), Contains("malformed trie") && Contains("past its 1 units"));
  const std::uint32_t trie_bytes = static_cast<std::uint8_t>(charsmap[0]) | static_cast<std::uint8_t>(charsmap[1]) << 8 |
                                   static_cast<std::uint8_t>(charsmap[2]) << 16 | static_cast<std::uint8_t>(charsmap[3]) << 24;
  doc["normalizer"]["precompiled_charsmap"] = base64(charsmap.substr(0, 4 + trie_bytes + 10));  // replacements cut
  REQUIRE_THROWS_WITH(tok::load_tokenizer(write(dir, doc)), Contains("not a NUL-terminated string"));
}
