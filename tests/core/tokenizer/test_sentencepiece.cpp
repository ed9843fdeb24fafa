// The Llama-2 sentencepiece model, against libsentencepiece itself and known Llama-2 ids.
#include <catch2/catch.hpp>
#include <sentencepiece_processor.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "core/tokenizer/tokenizer.hpp"
#include "tests/support/shared_data.hpp"
#include "tests/support/temp_dir.hpp"

namespace tok = cohort::core::tokenizer;
using cohort::test::shared_file;
using ids = std::vector<tok::token_id>;

namespace {

const std::vector<std::string> texts = {
    "Hello",
    "Hello world",
    " leading space and trailing  ",
    "ROMEO:\nBut, soft! what light through yonder window breaks?",
    "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72",
    "naïve café résumé — 日本語のテキスト, 中文, 한국어",
    "emoji 😀🎉👍🏽 and tabs\tand\r\nnewlines",
    "<s> literal control pieces </s> stay text",
    "",
};

}  // namespace

TEST_CASE("sentencepiece encoding matches libsentencepiece on every text", "[core][tokenizer]") {
  COHORT_SKIP_WITHOUT_SHARED("data/llama2-tokenizer.model");
  const std::string path = shared_file("data/llama2-tokenizer.model");
  const auto t = tok::load_tokenizer(path);
  sentencepiece::SentencePieceProcessor sp;
  REQUIRE(sp.Load(path).ok());
  for (const auto& text : texts) {
    INFO("text: " << text);
    std::vector<int> expected;
    REQUIRE(sp.Encode(text, &expected).ok());
    CHECK(t->encode(text) == ids(expected.begin(), expected.end()));
    std::string decoded;
    REQUIRE(sp.Decode(expected, &decoded).ok());
    CHECK(t->decode(t->encode(text)) == decoded);
  }
}

TEST_CASE("sentencepiece encoding matches libsentencepiece on GSM8K records", "[core][tokenizer]") {
  COHORT_SKIP_WITHOUT_SHARED("data/llama2-tokenizer.model");
  COHORT_SKIP_WITHOUT_SHARED("data/gsm8k-test.jsonl");
  const std::string path = shared_file("data/llama2-tokenizer.model");
  const auto t = tok::load_tokenizer(path);
  sentencepiece::SentencePieceProcessor sp;
  REQUIRE(sp.Load(path).ok());
  std::ifstream in(shared_file("data/gsm8k-test.jsonl"));
  std::string line;
  int records = 0;
  while (records < 100 && std::getline(in, line)) {
    const auto record = nlohmann::json::parse(line);
    for (const char* field : {"question", "answer"}) {
      const auto text = record.at(field).get<std::string>();
      std::vector<int> expected;
      REQUIRE(sp.Encode(text, &expected).ok());
      INFO("record " << records << " " << field);
      CHECK(t->encode(text) == ids(expected.begin(), expected.end()));
    }
    ++records;
  }
  CHECK(records == 100);
}

TEST_CASE("sentencepiece gives the known Llama-2 ids and special tokens", "[core][tokenizer]") {
  COHORT_SKIP_WITHOUT_SHARED("data/llama2-tokenizer.model");
  const auto t = tok::load_tokenizer(shared_file("data/llama2-tokenizer.model"));
  CHECK(t->encode("Hello") == ids{15043});
  CHECK(t->encode("Hello world") == ids{15043, 3186});
  CHECK(t->bos_id() == std::optional<tok::token_id>(1));
  CHECK(t->eos_id() == std::optional<tok::token_id>(2));
  CHECK_FALSE(t->pad_id().has_value());
  CHECK(t->vocab_size() == 32000);
  CHECK(t->token_to_id("▁Hello") == std::optional<tok::token_id>(15043));
  CHECK_FALSE(t->token_to_id("no-such-piece-at-all").has_value());
  const std::string id = t->identity();
  CHECK(id.rfind("sentencepiece:", 0) == 0);
  CHECK(id.size() == std::string("sentencepiece:").size() + 64);
}

TEST_CASE("sentencepiece added tokens are split out first and get ids after the vocabulary", "[core][tokenizer]") {
  COHORT_SKIP_WITHOUT_SHARED("data/llama2-tokenizer.model");
  const auto t = tok::load_tokenizer(shared_file("data/llama2-tokenizer.model"));
  CHECK(t->add_special_tokens({"<|user|>", "<s>"}) == ids{32000, 1});
  CHECK(t->vocab_size() == 32001);
  const auto encoded = t->encode("<s><|user|>Hello");
  CHECK(encoded == ids{1, 32000, 15043});
  CHECK(t->decode(encoded) == "<s><|user|>Hello");
  REQUIRE_THROWS_WITH(t->decode({32001}), Catch::Contains("32001"));
}

TEST_CASE("a directory with tokenizer.model loads it, with tokenizer_config.json overrides", "[core][tokenizer]") {
  COHORT_SKIP_WITHOUT_SHARED("data/llama2-tokenizer.model");
  cohort::test::temp_dir dir;
  std::filesystem::copy_file(shared_file("data/llama2-tokenizer.model"), dir.path("tokenizer.model"));
  dir.write("tokenizer_config.json", R"({"pad_token": "<unk>", "eos_token": {"content": "</s>"}})");
  const auto t = tok::load_tokenizer(dir.str());
  CHECK(t->pad_id() == std::optional<tok::token_id>(0));
  CHECK(t->eos_id() == std::optional<tok::token_id>(2));
  CHECK(t->encode("Hello") == ids{15043});
}
