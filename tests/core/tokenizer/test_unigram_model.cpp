// The Unigram model on a handmade vocabulary: best-scoring segmentation, unknown characters fused
// into one unk, byte_fallback. Expected ids are what Hugging Face tokenizers 0.23.2 gave for the
// same tokenizer.json.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/tokenizer/tokenizer.hpp"
#include "tests/support/temp_dir.hpp"

namespace tok = cohort::core::tokenizer;
using ids = std::vector<tok::token_id>;
using nlohmann::json;

namespace {

json small_unigram(bool byte_fallback) {
  const json metaspace = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "always"}, {"split", true}};
  return {{"version", "1.0"},
          {"added_tokens", json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", metaspace},
          {"post_processor", nullptr},
          {"decoder", metaspace},
          {"model",
           {{"type", "Unigram"},
            {"unk_id", 0},
            {"byte_fallback", byte_fallback},
            {"vocab", json::array({json::array({"<unk>", 0}), json::array({"\xE2\x96\x81", -2}), json::array({"a", -1.5}),
                                   json::array({"b", -2}), json::array({"ab", -3}), json::array({"\xE2\x96\x81" "ab", -3.2}),
                                   json::array({"abc", -4.9}), json::array({"c", -2.5}), json::array({"<0xC3>", -8}),
                                   json::array({"<0xA9>", -8})})}}}};
}

}  // namespace

TEST_CASE("Unigram picks the segmentation with the highest total score", "[core][tokenizer]") {
  cohort::test::temp_dir dir;
  const auto t = tok::load_tokenizer(dir.write("tokenizer.json", small_unigram(false).dump()));
  CHECK(t->encode("ab") == ids{5});
  CHECK(t->encode("abc abcab") == ids{5, 7, 5, 7, 4});
  CHECK(t->decode(t->encode("abc abcab")) == "abc abcab");
  CHECK(t->encode("") == ids{});
}

TEST_CASE("Unigram fuses consecutive unknown characters into one unk", "[core][tokenizer]") {
  cohort::test::temp_dir dir;
  const auto t = tok::load_tokenizer(dir.write("tokenizer.json", small_unigram(false).dump()));
  CHECK(t->encode("a\xC3\xA9\xC3\xA9" "b") == ids{1, 2, 0, 3});
  CHECK(t->encode("x\xC3\xA9y") == ids{1, 0});
  CHECK(t->encode("xyz ab zz") == ids{1, 0, 5, 1, 0});
}

TEST_CASE("Unigram with byte_fallback spells an unknown run in byte tokens when it has them all", "[core][tokenizer]") {
  cohort::test::temp_dir dir;
  const auto t = tok::load_tokenizer(dir.write("tokenizer.json", small_unigram(true).dump()));
  CHECK(t->encode("a\xC3\xA9\xC3\xA9" "b") == ids{1, 2, 8, 9, 8, 9, 3});
  CHECK(t->encode("\xC3\xA9\xC3\xA9" "b") == ids{1, 8, 9, 8, 9, 3});
  CHECK(t->encode("a\xC3\xA9\xC3\xA4\xC3\xA9") == ids{1, 2, 0});  // no <0xA4>: the whole run is unk
  CHECK(t->encode("x\xC3\xA9y") == ids{1, 0});
}

TEST_CASE("Unigram without an unk_id refuses a text it cannot cover, naming the character", "[core][tokenizer]") {
  cohort::test::temp_dir dir;
  json doc = small_unigram(false);
  doc["model"]["unk_id"] = nullptr;
  const auto t = tok::load_tokenizer(dir.write("tokenizer.json", doc.dump()));
  CHECK(t->encode("ab") == ids{5});
  REQUIRE_THROWS_WITH(t->encode("abz"), Catch::Contains("\"z\"") && Catch::Contains("no \"unk_id\""));
}
