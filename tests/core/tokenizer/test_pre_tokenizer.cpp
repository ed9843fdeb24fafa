// Pre-tokenizers from the tokenizer.json schema: Qwen2's and Llama-3's split regexes (PCRE2 with
// Unicode properties), every Split behaviour, invert, ByteLevel, and their use inside a full
// tokenizer.json.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/tokenizer/pre_tokenizer.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "tests/core/tokenizer/tokenizer_test_support.hpp"
#include "tests/support/temp_dir.hpp"

namespace tok = cohort::core::tokenizer;
using nlohmann::json;

namespace {

const char* const qwen2_pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const llama3_pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

json split_spec(const std::string& pattern, const std::string& behavior, bool invert = false) {
  return {{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", behavior}, {"invert", invert}};
}

std::vector<std::string> pre_tokenize(const json& spec, const std::string& text) {
  const auto p = tok::make_pre_tokenizer(spec, "test");
  std::vector<tok::piece> pieces{{text, true}};
  p->apply(pieces);
  std::vector<std::string> out;
  for (const auto& piece : pieces) out.push_back(piece.text);
  return out;
}

using strings = std::vector<std::string>;

}  // namespace

TEST_CASE("Qwen2's split regex cuts text as the pattern prescribes", "[core][tokenizer]") {
  const json spec = split_spec(qwen2_pattern, "Isolated");
  CHECK(pre_tokenize(spec, "Hello world's 123 foo\n\n  bar!!\r\n") ==
        strings{"Hello", " world", "'s", " ", "1", "2", "3", " foo", "\n\n", " ", " bar", "!!\r\n"});
  // (?i:...) contractions, punctuation glued to the following letters, Unicode letters.
  CHECK(pre_tokenize(spec, "IT'S x(hello) (café) 你好世界") ==
        strings{"IT", "'S", " x", "(hello", ")", " (", "café", ")", " 你好世界"});
  CHECK(pre_tokenize(spec, "x\t\ty") == strings{"x", "\t", "\ty"});
  CHECK(pre_tokenize(spec, "émoji 🎉🎉 ok") == strings{"émoji", " 🎉🎉", " ok"});
  CHECK(pre_tokenize(spec, "").empty());
}

TEST_CASE("Llama-3's split regex groups digits by three", "[core][tokenizer]") {
  CHECK(pre_tokenize(split_spec(llama3_pattern, "Isolated"), "year 2024567!") ==
        strings{"year", " ", "202", "456", "7", "!"});
}

TEST_CASE("Split behaviours and invert follow Hugging Face's definitions", "[core][tokenizer]") {
  const std::string text = "a-b--c-";
  CHECK(pre_tokenize(split_spec("-", "Isolated"), text) == strings{"a", "-", "b", "-", "-", "c", "-"});
  CHECK(pre_tokenize(split_spec("-", "Removed"), text) == strings{"a", "b", "c"});
  CHECK(pre_tokenize(split_spec("-", "MergedWithPrevious"), text) == strings{"a-", "b-", "-", "c-"});
  CHECK(pre_tokenize(split_spec("-", "MergedWithNext"), text) == strings{"a", "-b", "-", "-c", "-"});
  CHECK(pre_tokenize(split_spec("-", "Contiguous"), text) == strings{"a", "-", "b", "--", "c", "-"});
  CHECK(pre_tokenize(split_spec("-", "Removed", true), text) == strings{"-", "-", "-", "-"});
  const json literal = {{"type", "Split"}, {"pattern", {{"String", "."}}}, {"behavior", "Removed"}, {"invert", false}};
  CHECK(pre_tokenize(literal, "a.b*c") == strings{"a", "b*c"});
}

TEST_CASE("regex classes follow Oniguruma's Unicode \\s and \\w, as Hugging Face's Split does", "[core][tokenizer]") {
  // U+180E is not White_Space (onig), though PCRE2's own \s would take it.
  CHECK(pre_tokenize(split_spec(R"(\s+)", "Removed"), "a\u180eb c\u2000d") == strings{"a\u180eb", "c", "d"});
  CHECK(pre_tokenize(split_spec(R"([^\s]+)", "Removed", true), "a\u180eb c") == strings{"a\u180eb", "c"});
  // Combining marks are word characters; U+00B2 (superscript two, No) is not.
  CHECK(pre_tokenize(split_spec(R"(\w+)", "Isolated"), "e\u0301x\u00b2") == strings{"e\u0301x", "\u00b2"});
  CHECK(pre_tokenize(split_spec(R"(\W)", "Removed"), "a-b") == strings{"a", "b"});
  CHECK(pre_tokenize(split_spec(R"([\w\]]+)", "Isolated"), "a]b c") == strings{"a]b", " ", "c"});
}

TEST_CASE("Digits, Whitespace and WhitespaceSplit split as Hugging Face's do", "[core][tokenizer]") {
  CHECK(pre_tokenize({{"type", "Digits"}, {"individual_digits", true}}, "a12b3") == strings{"a", "1", "2", "b", "3"});
  CHECK(pre_tokenize({{"type", "Digits"}, {"individual_digits", false}}, "a12b3") == strings{"a", "12", "b", "3"});
  CHECK(pre_tokenize({{"type", "Whitespace"}}, "Hey  friend!? ok") == strings{"Hey", "friend", "!?", "ok"});
  CHECK(pre_tokenize({{"type", "WhitespaceSplit"}}, " a\tb\u3000c ") == strings{"a", "b", "c"});
}

TEST_CASE("ByteLevel splits with GPT-2's regex and maps bytes to GPT-2's symbols", "[core][tokenizer]") {
  const json spec = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  CHECK(pre_tokenize(spec, "Hi there\n") == strings{"Hi", "Ġthere", "Ċ"});
  const json prefixed = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", false}};
  CHECK(pre_tokenize(prefixed, "é x") == strings{"ĠÃ©Ġx"});
}

TEST_CASE("a Qwen2-style tokenizer.json never merges across the regex's splits", "[core][tokenizer]") {
  using cohort::test::byte_symbol;
  const std::string sp = byte_symbol(' ');
  const json pre = {{"type", "Sequence"},
                    {"pretokenizers",
                     {split_spec(qwen2_pattern, "Isolated"),
                      {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}, {"trim_offsets", false}}}}};
  // Merges (ids from 256): sp+"a"=256, sp+"a"+"b"=257, "ab"=258, "12"=259; <|im_start|>=260.
  json doc = cohort::test::byte_level_tokenizer_json(
      {{sp, "a"}, {sp + "a", "b"}, {"a", "b"}, {"1", "2"}}, pre,
      json::array({{{"id", 260}, {"content", "<|im_start|>"}, {"special", true}, {"normalized", false},
                    {"lstrip", false}, {"rstrip", false}, {"single_word", false}}}));
  doc["normalizer"] = {{"type", "NFC"}};
  cohort::test::temp_dir dir;
  const auto t = tok::load_tokenizer(dir.write("tokenizer.json", doc.dump()));
  // "ab1 12" -> pieces "ab", "1", " ", "1", "2": digits stay single, so "12" never merges.
  CHECK(t->encode("ab1 12") == std::vector<tok::token_id>{258, '1', ' ', '1', '2'});
  CHECK(t->encode(" ab<|im_start|> a") == std::vector<tok::token_id>{257, 260, 256});
  // NFC: "e" + combining acute becomes the single code point é (bytes C3 A9).
  CHECK(t->encode("e\xCC\x81") == std::vector<tok::token_id>{0xC3, 0xA9});
  CHECK(t->decode(t->encode(" ab<|im_start|> a")) == " ab<|im_start|> a");
}
