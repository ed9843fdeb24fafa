// The data set's added tokens written into an export's tokenizer files as transformers keeps them
// (tokenizer.json, tokenizer_config.json, special_tokens_map.json, added_tokens.json), at the data
// set's ids, and the conflicts that mean another tokenizer refused naming the file.
#include "tests/support/catch_torch.hpp"

#include <nlohmann/json.hpp>

#include "core/ckpt/ckpt_error.hpp"
#include "core/ckpt/tokenizer_added_tokens.hpp"
#include "tests/support/files.hpp"
#include "tests/support/temp_dir.hpp"

using namespace cohort::core::ckpt;
using cohort::test::read_file;
using cohort::test::temp_dir;
using nlohmann::json;

namespace {

const std::vector<added_token_id> tokens = {{259, "<USER>"}, {260, "<BOT>"}};

json read_json(const std::string& path) { return json::parse(read_file(path)); }

// A tokenizer.json as transformers' fast tokenizers save it, abridged: keys out of alphabetical
// order, one added token, a model whose vocabulary holds "<BOT>" already.
const char* tokenizer_json = R"({"version": "1.0", "truncation": null, "added_tokens": [
  {"id": 2, "content": "</s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false,
   "special": true}], "normalizer": null, "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}})";

}  // namespace

TEST_CASE("added tokens go into tokenizer.json, tokenizer_config.json and special_tokens_map.json at the "
          "data set's ids, other keys kept in their order",
          "[core][ckpt][added_tokens]") {
  temp_dir dir;
  dir.write("tokenizer.json", tokenizer_json);
  dir.write("tokenizer_config.json", R"({"eos_token": "</s>", "added_tokens_decoder": {"2": {"content": "</s>",
    "lstrip": false, "normalized": false, "rstrip": false, "single_word": false, "special": true}},
    "additional_special_tokens": ["<BOT>"]})");
  dir.write("special_tokens_map.json", R"({"eos_token": {"content": "</s>", "lstrip": false, "normalized": false,
    "rstrip": false, "single_word": false}, "additional_special_tokens": [{"content": "<X>", "lstrip": false,
    "normalized": false, "rstrip": false, "single_word": false}]})");
  const auto changed = add_tokens_to_tokenizer_files(dir.str(), tokens);
  CHECK(changed == std::vector<std::string>{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"});

  const auto tok = read_json(dir.path("tokenizer.json"));
  const auto& added = tok["added_tokens"];
  REQUIRE(added.size() == 3);
  CHECK(added[1] == json::parse(R"({"id": 259, "content": "<USER>", "single_word": false, "lstrip": false,
                                     "rstrip": false, "normalized": false, "special": true})"));
  CHECK(added[2]["id"] == 260);
  CHECK(added[2]["content"] == "<BOT>");
  CHECK(read_file(dir.path("tokenizer.json")).find("\"version\"") < read_file(dir.path("tokenizer.json")).find("\"added_tokens\""));
  CHECK(tok["model"]["vocab"]["b"] == 1);

  const auto config = read_json(dir.path("tokenizer_config.json"));
  CHECK(config["added_tokens_decoder"]["259"]["content"] == "<USER>");
  CHECK(config["added_tokens_decoder"]["260"]["special"] == true);
  CHECK(config["added_tokens_decoder"]["2"]["content"] == "</s>");
  CHECK(config["additional_special_tokens"] == json::parse(R"(["<BOT>", "<USER>"])"));  // no duplicate
  const auto map = read_json(dir.path("special_tokens_map.json"));
  REQUIRE(map["additional_special_tokens"].size() == 3);
  CHECK(map["additional_special_tokens"][1]["content"] == "<USER>");  // objects, as the file has them
  CHECK_FALSE(map["additional_special_tokens"][1].contains("special"));

  // Written again (a second export of the same run): nothing is added twice.
  add_tokens_to_tokenizer_files(dir.str(), tokens);
  CHECK(read_json(dir.path("tokenizer.json"))["added_tokens"].size() == 3);
  CHECK(read_json(dir.path("special_tokens_map.json"))["additional_special_tokens"].size() == 3);
}

TEST_CASE("a tokenizer_config.json of transformers 5 gets the tokens in its extra_special_tokens list",
          "[core][ckpt][added_tokens]") {
  temp_dir dir;
  dir.write("tokenizer_config.json", R"({"extra_special_tokens": ["<X>"]})");
  add_tokens_to_tokenizer_files(dir.str(), tokens);
  const auto config = read_json(dir.path("tokenizer_config.json"));
  CHECK(config["extra_special_tokens"] == json::parse(R"(["<X>", "<USER>", "<BOT>"])"));
  CHECK_FALSE(config.contains("additional_special_tokens"));
}

TEST_CASE("a sentencepiece tokenizer without tokenizer.json gets its added tokens in added_tokens.json",
          "[core][ckpt][added_tokens]") {
  temp_dir dir;
  dir.write("tokenizer.model", "not read");
  CHECK(add_tokens_to_tokenizer_files(dir.str(), tokens) == std::vector<std::string>{"added_tokens.json"});
  CHECK(read_json(dir.path("added_tokens.json")) == json::parse(R"({"<USER>": 259, "<BOT>": 260})"));
  temp_dir none;  // no tokenizer at all: nothing to write
  CHECK(add_tokens_to_tokenizer_files(none.str(), tokens).empty());
}

TEST_CASE("tokenizer files that give an added token another id, or its id to another token, are refused "
          "naming the file",
          "[core][ckpt][added_tokens]") {
  temp_dir dir;
  dir.write("tokenizer.json", R"({"added_tokens": [{"id": 7, "content": "<USER>"}]})");
  try {
    add_tokens_to_tokenizer_files(dir.str(), tokens);
    FAIL("expected a conflict");
  } catch (const ckpt_error& e) {
    CHECK(e.code() == ckpt_errc::bad_input);
    CHECK_THAT(e.what(), Catch::Contains(dir.path("tokenizer.json")) && Catch::Contains("the id 7") &&
                             Catch::Contains("259"));
  }
  dir.write("tokenizer.json", R"({"added_tokens": [{"id": 260, "content": "<pad>"}]})");
  CHECK_THROWS_WITH(add_tokens_to_tokenizer_files(dir.str(), tokens),
                    Catch::Contains("gives the id 260 to \"<pad>\""));
  temp_dir config;
  config.write("tokenizer_config.json", R"({"added_tokens_decoder": {"259": {"content": "<pad>"}}})");
  CHECK_THROWS_WITH(add_tokens_to_tokenizer_files(config.str(), tokens),
                    Catch::Contains("tokenizer_config.json") && Catch::Contains("gives the id 259 to \"<pad>\""));
  temp_dir broken;
  broken.write("tokenizer.json", "{not json");
  CHECK_THROWS_WITH(add_tokens_to_tokenizer_files(broken.str(), tokens), Catch::Contains("not JSON"));
}

TEST_CASE("a checkpoint's added tokens are read from its extra, and anything else there is refused",
          "[core][ckpt][added_tokens]") {
  CHECK(added_tokens_of(json::object(), "m").empty());
  const auto read = added_tokens_of(json::parse(R"({"added_tokens": [{"id": 5, "content": "<A>"}]})"), "m");
  REQUIRE(read.size() == 1);
  CHECK(read[0].id == 5);
  CHECK(read[0].content == "<A>");
  CHECK_THROWS_WITH(added_tokens_of(json::parse(R"({"added_tokens": [{"id": "5", "content": "<A>"}]})"), "m.json"),
                    Catch::Contains("m.json: extra.added_tokens"));
  CHECK_THROWS_AS(added_tokens_of(json::parse(R"({"added_tokens": {}})"), "m"), ckpt_error);
}
