// The GPT-2 style tokenizer.json written by Hugging Face tokenizers, against the ids that library
// produced.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <thread>

#include "core/tokenizer/tokenizer.hpp"
#include "tests/support/shared_data.hpp"
#include "tests/support/temp_dir.hpp"

namespace tok = cohort::core::tokenizer;
using cohort::test::shared_file;

namespace {

nlohmann::json reference() {
  std::ifstream in(shared_file("fixtures/tokenizers/bpe-gpt2style/reference.json"));
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("byte-level BPE encodes every reference text exactly as Hugging Face tokenizers", "[core][tokenizer]") {
  const auto t = tok::load_tokenizer(shared_file("fixtures/tokenizers/bpe-gpt2style/tokenizer.json"));
  const auto ref = reference();
  REQUIRE(ref.size() >= 20);
  for (const auto& entry : ref) {
    const auto text = entry.at("text").get<std::string>();
    INFO("text: " << text);
    CHECK(t->encode(text) == entry.at("ids").get<std::vector<tok::token_id>>());
  }
}

TEST_CASE("byte-level BPE decodes its own encoding back to the original text", "[core][tokenizer]") {
  const auto t = tok::load_tokenizer(shared_file("fixtures/tokenizers/bpe-gpt2style/tokenizer.json"));
  for (const auto& entry : reference()) {
    const auto text = entry.at("text").get<std::string>();
    INFO("text: " << text);
    CHECK(t->decode(t->encode(text)) == text);
    CHECK(t->decode(entry.at("ids").get<std::vector<tok::token_id>>()) == text);
  }
}

TEST_CASE("encoding gives the same ids on repeat (cache) and from several threads", "[core][tokenizer]") {
  const auto t = tok::load_tokenizer(shared_file("fixtures/tokenizers/bpe-gpt2style/tokenizer.json"));
  const auto ref = reference();
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (int round = 0; round < 5; ++round) {
        for (const auto& entry : ref) {
          if (t->encode(entry.at("text").get<std::string>()) != entry.at("ids").get<std::vector<tok::token_id>>()) {
            ++mismatches[static_cast<std::size_t>(w)];
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(mismatches == std::vector<int>(4, 0));
}

TEST_CASE("GPT-2 style tokenizer reports <|endoftext|> as EOS and its vocabulary size", "[core][tokenizer]") {
  const auto t = tok::load_tokenizer(shared_file("fixtures/tokenizers/bpe-gpt2style/tokenizer.json"));
  CHECK(t->eos_id() == std::optional<tok::token_id>(0));
  CHECK_FALSE(t->pad_id().has_value());
  CHECK(t->vocab_size() == 1000);
  CHECK(t->token_to_id("<|endoftext|>") == std::optional<tok::token_id>(0));
  CHECK(t->encode("a<|endoftext|>b") == std::vector<tok::token_id>{65, 0, 66});
}

TEST_CASE("special tokens come from tokenizer_config.json when it sits next to tokenizer.json", "[core][tokenizer]") {
  cohort::test::temp_dir dir;
  std::filesystem::copy_file(shared_file("fixtures/tokenizers/bpe-gpt2style/tokenizer.json"), dir.path("tokenizer.json"));
  dir.write("tokenizer_config.json",
            R"({"bos_token": {"content": "<|endoftext|>", "lstrip": false}, "eos_token": "<|endoftext|>", "pad_token": null})");
  dir.write("special_tokens_map.json", R"({"pad_token": "a"})");
  const auto t = tok::load_tokenizer(dir.str());
  CHECK(t->bos_id() == std::optional<tok::token_id>(0));
  CHECK(t->eos_id() == std::optional<tok::token_id>(0));
  CHECK(t->pad_id() == std::optional<tok::token_id>(65));  // filled in from special_tokens_map.json

  dir.write("tokenizer_config.json", R"({"pad_token": "<no-such-token>"})");
  REQUIRE_THROWS_AS(tok::load_tokenizer(dir.str()), tok::tokenizer_error);
  REQUIRE_THROWS_WITH(tok::load_tokenizer(dir.str()), Catch::Contains("pad_token") && Catch::Contains("<no-such-token>"));
}

TEST_CASE("identity names the kind and the SHA-256 of the file, and changes with added tokens", "[core][tokenizer]") {
  const auto t = tok::load_tokenizer(shared_file("fixtures/tokenizers/bpe-gpt2style/tokenizer.json"));
  const std::string id = t->identity();
  REQUIRE(id.rfind("hf-bpe:", 0) == 0);
  CHECK(id.size() == std::string("hf-bpe:").size() + 64);
  CHECK(tok::load_tokenizer(shared_file("fixtures/tokenizers/bpe-gpt2style/tokenizer.json"))->identity() == id);
  t->add_special_tokens({"<|user|>"});
  CHECK(t->identity() != id);
  CHECK(t->identity().rfind(id, 0) == 0);
}

TEST_CASE("added special tokens get ids after the vocabulary and are never split", "[core][tokenizer]") {
  const auto t = tok::load_tokenizer(shared_file("fixtures/tokenizers/bpe-gpt2style/tokenizer.json"));
  const auto ids = t->add_special_tokens({"<|user|>", "<|assistant|>", "<|endoftext|>", "a"});
  CHECK(ids == std::vector<tok::token_id>{1000, 1001, 0, 65});
  CHECK(t->vocab_size() == 1002);
  const auto encoded = t->encode("<|user|>Hello world<|assistant|>a");
  CHECK(encoded == std::vector<tok::token_id>{1000, 538, 286, 79, 507, 337, 1001, 65});
  CHECK(t->decode(encoded) == "<|user|>Hello world<|assistant|>a");
  CHECK(t->add_special_tokens({"<|user|>"}) == std::vector<tok::token_id>{1000});
}

TEST_CASE("decoding an id outside the vocabulary and encoding invalid UTF-8 are refused", "[core][tokenizer]") {
  const auto t = tok::load_tokenizer(shared_file("fixtures/tokenizers/bpe-gpt2style/tokenizer.json"));
  REQUIRE_THROWS_WITH(t->decode({5, 1000}), Catch::Contains("1000") && Catch::Contains("0..999"));
  REQUIRE_THROWS_WITH(t->encode("ok \xC3\x28"), Catch::Contains("UTF-8") && Catch::Contains("byte 3"));
}
