// Added tokens in tokenizer.json: lstrip, rstrip, single_word, normalized, leftmost-longest.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/tokenizer/tokenizer.hpp"
#include "tests/core/tokenizer/tokenizer_test_support.hpp"
#include "tests/support/temp_dir.hpp"

namespace tok = cohort::core::tokenizer;
using nlohmann::json;
using ids = std::vector<tok::token_id>;

namespace {

json added(int id, const std::string& content, bool lstrip, bool rstrip, bool single_word, bool normalized = false) {
  return {{"id", id},         {"content", content},         {"special", !normalized},
          {"lstrip", lstrip}, {"rstrip", rstrip},           {"single_word", single_word},
          {"normalized", normalized}};
}

std::unique_ptr<tok::tokenizer> tokenizer_with(const json& added_tokens, const json& normalizer,
                                               const cohort::test::temp_dir& dir) {
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  json doc = cohort::test::byte_level_tokenizer_json({}, byte_level, added_tokens);
  doc["normalizer"] = normalizer;
  return tok::load_tokenizer(dir.write("tokenizer.json", doc.dump()));
}

}  // namespace

TEST_CASE("added tokens honour lstrip, rstrip and single_word", "[core][tokenizer]") {
  cohort::test::temp_dir dir;
  const auto t = tokenizer_with(json::array({added(256, "<L>", true, false, false), added(257, "<R>", false, true, false),
                                             added(258, "<W>", false, false, true)}),
                                nullptr, dir);
  CHECK(t->encode("a  <L>b") == ids{'a', 256, 'b'});          // spaces before <L> are absorbed
  CHECK(t->encode("a<R> \t b") == ids{'a', 257, 'b'});        // whitespace after <R> is absorbed
  CHECK(t->encode("x <W> y") == ids{'x', 32, 258, 32, 'y'});  // a whole word: matched
  CHECK(t->encode("x<W>") == ids{'x', '<', 'W', '>'});        // glued to a word: plain text
  CHECK(t->vocab_size() == 259);
}

TEST_CASE("added tokens take ids after the vocab in file order, or their vocab id, as Hugging Face assigns them",
          "[core][tokenizer]") {
  cohort::test::temp_dir dir;
  // The file's ids are inconsistent (7 is the byte '\a', 900 leaves a gap); Hugging Face ignores them.
  const auto t = tokenizer_with(json::array({added(900, "<x>", false, false, false), added(7, "<y>", false, false, false),
                                             added(1, "a", false, false, false)}),
                                nullptr, dir);
  CHECK(t->encode("<y>a<x>") == ids{257, 'a', 256});
  CHECK(t->vocab_size() == 258);
}

TEST_CASE("added tokens match leftmost-longest", "[core][tokenizer]") {
  cohort::test::temp_dir dir;
  const auto t = tokenizer_with(json::array({added(256, "<a>", false, false, false), added(257, "<a><b>", false, false, false)}),
                                nullptr, dir);
  CHECK(t->encode("<a><b><a>") == ids{257, 256});
}

TEST_CASE("normalized added tokens are matched after the normalizer ran", "[core][tokenizer]") {
  cohort::test::temp_dir dir;
  const json lowercase = {{"type", "Lowercase"}};
  const auto t = tokenizer_with(json::array({added(256, "Hey", false, false, false, true), added(257, "<X>", false, false, false)}),
                                lowercase, dir);
  CHECK(t->encode("HEY<X>") == ids{256, 257});  // "HEY" lowercases to "hey", which matches "Hey" normalized
  CHECK(t->decode({256, 257}) == "hey<X>");      // a normalized token decodes to its normalized form
  CHECK(t->encode("<x>") == ids{'<', 'x', '>'});  // non-normalized tokens match the raw text only
}
