// tokenizer.json files converted from sentencepiece (Llama / Mistral "fast" tokenizers): Prepend
// and Replace normalizers or a Metaspace pre-tokenizer, byte_fallback, unk fusing, and the
// Replace / ByteFallback / Fuse / Strip decoder chain.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/tokenizer/tokenizer.hpp"
#include "tests/support/temp_dir.hpp"

namespace tok = cohort::core::tokenizer;
using nlohmann::json;
using ids = std::vector<tok::token_id>;

namespace {

// <unk>=0 <s>=1 </s>=2, <0x00>..<0xFF> = 3..258, ▁=259 h=260 i=261 ▁h=262 ▁hi=263.
json llama_style(bool byte_fallback, bool fuse_unk) {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  vocab["▁"] = 259;
  vocab["h"] = 260;
  vocab["i"] = 261;
  vocab["▁h"] = 262;
  vocab["▁hi"] = 263;
  const auto special = [](int id, const char* content) {
    return json{{"id", id},         {"content", content}, {"special", true}, {"normalized", false},
                {"lstrip", false},  {"rstrip", false},    {"single_word", false}};
  };
  return {
      {"version", "1.0"},
      {"added_tokens", {special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")}},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", "▁"}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}}}}},
      {"pre_tokenizer", nullptr},
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        {"merges", {"▁ h", "▁h i"}},
        {"unk_token", "<unk>"},
        {"byte_fallback", byte_fallback},
        {"fuse_unk", fuse_unk},
        {"dropout", nullptr}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
  };
}

}  // namespace

TEST_CASE("a Llama-style tokenizer.json prepends ▁, falls back to bytes and decodes back", "[core][tokenizer]") {
  cohort::test::temp_dir dir;
  const auto t = tok::load_tokenizer(dir.write("tokenizer.json", llama_style(true, true).dump()));
  CHECK(t->encode("hi hi") == ids{263, 263});
  CHECK(t->encode("hié") == ids{263, 3 + 0xC3, 3 + 0xA9});
  CHECK(t->encode("<s>hi") == ids{1, 263});
  CHECK(t->decode({263, 263, 3 + 0xC3, 3 + 0xA9}) == "hi hié");
  CHECK(t->decode(t->encode("hi hié")) == "hi hié");
  CHECK(t->decode({3 + 0xC3}) == "\xEF\xBF\xBD");  // a lone lead byte decodes to U+FFFD
  CHECK(t->bos_id() == std::optional<tok::token_id>(1));
  CHECK(t->eos_id() == std::optional<tok::token_id>(2));
}

TEST_CASE("without byte_fallback unknown characters become <unk>, fused when fuse_unk is set", "[core][tokenizer]") {
  cohort::test::temp_dir dir;
  const auto fused = tok::load_tokenizer(dir.write("tokenizer.json", llama_style(false, true).dump()));
  CHECK(fused->encode("xyhi") == ids{259, 0, 260, 261});
  const auto unfused = tok::load_tokenizer(dir.write("tokenizer.json", llama_style(false, false).dump()));
  CHECK(unfused->encode("xyhi") == ids{259, 0, 0, 260, 261});
}

TEST_CASE("a Metaspace pre-tokenizer prepends ▁ only where its prepend_scheme says", "[core][tokenizer]") {
  cohort::test::temp_dir dir;
  json doc = llama_style(true, true);
  doc["normalizer"] = nullptr;
  doc["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}, {"split", false}};
  doc["decoder"] = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}, {"split", false}};
  const auto first = tok::load_tokenizer(dir.write("tokenizer.json", doc.dump()));
  CHECK(first->encode("hi hi") == ids{263, 263});
  CHECK(first->encode("<s>hi") == ids{1, 260, 261});  // the segment after <s> is not at the start
  CHECK(first->decode({263, 263}) == "hi hi");
  doc["pre_tokenizer"]["prepend_scheme"] = "always";
  const auto always = tok::load_tokenizer(dir.write("tokenizer.json", doc.dump()));
  CHECK(always->encode("<s>hi") == ids{1, 263});
}
