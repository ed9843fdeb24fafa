// Tests of the dataset builder: text and jsonl into token shards.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/data/build/builder.hpp"
#include "core/data/build/sft_template.hpp"
#include "core/data/dataset.hpp"
#include "core/data/verify.hpp"
#include "tests/core/data/byte_tokenizer.hpp"
#include "tests/support/temp_dir.hpp"

using namespace cohort::core::data;
using cohort::core::data::testing::byte_tokenizer;
using cohort::test::temp_dir;

namespace {

std::vector<std::int64_t> bytes_of(const std::string& s) {
  std::vector<std::int64_t> out;
  for (unsigned char c : s) out.push_back(3 + c);
  return out;
}

build_options options_for(const std::string& input, const std::string& out, std::int64_t seq_len) {
  build_options o;
  o.input = input;
  o.out_dir = out;
  o.seq_len = seq_len;
  o.tokenizer_path = "bytes";
  o.progress = false;
  o.threads = 2;
  return o;
}

std::vector<std::int64_t> all_tokens(const dataset& ds) {
  std::vector<std::int64_t> out;
  for (std::int64_t i = 0; i < ds.size(); ++i) {
    const auto t = ds.sample_tokens(i);
    out.insert(out.end(), t.begin(), t.end());
  }
  return out;
}

}  // namespace

TEST_CASE("pretraining text is EOS-separated per file and packed into seq_len blocks", "[core][data]") {
  temp_dir tmp;
  tmp.write("corpus/a.txt", "hello\nworld\n");
  tmp.write("corpus/sub/b.txt", "xyz");
  tmp.write("corpus/ignored.md", "not text input");
  byte_tokenizer tok;
  const auto report = build_dataset(options_for(tmp.path("corpus"), tmp.path("out"), 4), tok);
  dataset ds(tmp.path("out"));
  std::vector<std::int64_t> expected{1};
  for (auto t : bytes_of("hello\nworld\n")) expected.push_back(t);
  expected.push_back(2);
  expected.push_back(1);
  for (auto t : bytes_of("xyz")) expected.push_back(t);
  expected.push_back(2);
  CHECK(all_tokens(ds) == expected);
  REQUIRE(ds.size() == 5);  // 19 tokens: four blocks of 4 and the remainder of 3
  for (std::int64_t i = 0; i < 4; ++i) CHECK(ds.sample_length(i) == 4);
  CHECK(ds.sample_length(4) == 3);
  CHECK(ds.info().kind == "pretrain");
  CHECK(ds.info().layout == "pack");
  CHECK(ds.info().records == 2);
  CHECK_FALSE(ds.info().has_loss_mask);
  CHECK(report.result.tokens == 19);
}

TEST_CASE("a large text file streams in chunks and every byte arrives in order", "[core][data]") {
  temp_dir tmp;
  std::string text;
  for (int i = 0; i < 5000; ++i) text += "line " + std::to_string(i) + " of the corpus\n";
  tmp.write("big.txt", text);
  byte_tokenizer tok;
  auto o = options_for(tmp.path("big.txt"), tmp.path("out"), 128);
  o.chunk_bytes = 1000;  // many chunks, several in flight
  o.threads = 3;
  o.shard_tokens = 5000;
  build_dataset(o, tok);
  dataset ds(tmp.path("out"));
  auto expected = bytes_of(text);
  expected.insert(expected.begin(), 1);
  expected.push_back(2);
  CHECK(all_tokens(ds) == expected);
  CHECK(ds.info().shards.size() > 10);
  CHECK(verify_dataset(tmp.path("out")).empty());
}

TEST_CASE("jsonl pretraining text comes from --field, one document per line", "[core][data]") {
  temp_dir tmp;
  tmp.write("d.jsonl", "{\"text\": \"ab\", \"id\": 1}\n\n{\"text\": \"c\"}\n");
  byte_tokenizer tok;
  auto o = options_for(tmp.path("d.jsonl"), tmp.path("out"), 100);
  o.field = "text";
  build_dataset(o, tok);
  dataset ds(tmp.path("out"));
  CHECK(all_tokens(ds) == std::vector<std::int64_t>{1, 3 + 'a', 3 + 'b', 2, 1, 3 + 'c', 2});
  CHECK(ds.info().records == 2);
}

TEST_CASE("SFT samples mask the prompt and keep the last field and EOS in the loss", "[core][data]") {
  temp_dir tmp;
  tmp.write("sft.jsonl", "{\"question\": \"2+2?\", \"answer\": \"4\"}\n{\"question\": \"hi\", \"answer\": \"yo\"}\n");
  byte_tokenizer tok;
  auto o = options_for(tmp.path("sft.jsonl"), tmp.path("out"), 64);
  o.template_text = "Q: {question}\\nA: {answer}";
  build_dataset(o, tok);
  dataset ds(tmp.path("out"));
  REQUIRE(ds.size() == 2);
  CHECK(ds.info().kind == "sft");
  CHECK(ds.info().layout == "pad");
  std::vector<std::int64_t> expected{1};
  for (auto t : bytes_of("Q: 2+2?\nA: 4")) expected.push_back(t);
  expected.push_back(2);
  CHECK(ds.sample_tokens(0) == expected);
  const auto prompt = std::string("Q: 2+2?\nA: ").size();
  std::vector<std::uint8_t> mask(1 + prompt, 0);
  mask.push_back(1);  // "4"
  mask.push_back(1);  // EOS
  CHECK(ds.sample_loss_mask(0) == mask);
  CHECK(ds.info().loss_tokens == 2 + 3);
}

TEST_CASE("special tokens from a tokens file stay whole in SFT samples and the manifest records their ids",
          "[core][data]") {
  temp_dir tmp;
  tmp.write("sft.jsonl", "{\"q\": \"x\", \"a\": \"y\"}\n");
  tmp.write("tokens.json", "{\"tokens\": [\"<USER>\", \"<BOT>\"]}");
  byte_tokenizer tok;
  auto o = options_for(tmp.path("sft.jsonl"), tmp.path("out"), 64);
  o.template_text = "<USER>{q}<BOT>{a}";
  o.special_tokens_file = tmp.path("tokens.json");
  build_dataset(o, tok);
  dataset ds(tmp.path("out"));
  CHECK(ds.sample_tokens(0) == std::vector<std::int64_t>{1, 259, 3 + 'x', 260, 3 + 'y', 2});
  CHECK(ds.info().vocab_size == 261);
  CHECK(ds.info().special_tokens == std::vector<std::string>{"<USER>", "<BOT>"});
  // Their ids go into the manifest too: a job that adds the tokens to its model takes them from there.
  CHECK(ds.info().special_token_ids == std::vector<std::int64_t>{259, 260});
  auto j = nlohmann::json::parse(manifest_to_json(ds.info()));
  CHECK(j["special_token_ids"] == nlohmann::json::parse("[259, 260]"));
  // A manifest without them (an older build) still reads; a malformed list is refused.
  j.erase("special_token_ids");
  const auto old = manifest_from_json(j.dump(), "m.json");
  CHECK(old.special_tokens.size() == 2);
  CHECK(old.special_token_ids.empty());
  j["special_token_ids"] = {259};
  CHECK_THROWS_WITH(manifest_from_json(j.dump(), "m.json"), Catch::Contains("m.json: special_token_ids has 1 ids for 2"));
  j["special_token_ids"] = {259, 261};
  CHECK_THROWS_WITH(manifest_from_json(j.dump(), "m.json"), Catch::Contains("261, outside the vocabulary [0, 261)"));
  // A data set without special tokens writes no such field.
  tmp.write("plain.txt", "abc");
  byte_tokenizer plain;
  const auto p = build_dataset(options_for(tmp.path("plain.txt"), tmp.path("plain"), 8), plain);
  CHECK_FALSE(nlohmann::json::parse(manifest_to_json(p.result)).contains("special_token_ids"));
}

TEST_CASE("over-long SFT samples are truncated to seq_len and counted", "[core][data]") {
  temp_dir tmp;
  tmp.write("sft.jsonl", "{\"q\": \"short\", \"a\": \"ok\"}\n{\"q\": \"a much longer question\", \"a\": \"long answer\"}\n");
  byte_tokenizer tok;
  auto o = options_for(tmp.path("sft.jsonl"), tmp.path("out"), 12);
  o.template_text = "{q} {a}";
  const auto report = build_dataset(o, tok);
  dataset ds(tmp.path("out"));
  CHECK(ds.sample_length(0) == 1 + 8 + 1);
  CHECK(ds.sample_length(1) == 12);
  CHECK(report.result.truncated_samples == 1);
  CHECK(report.result.truncated_tokens == 1 + 34 + 1 - 12);
  CHECK(ds.info().truncated_samples == 1);
}

TEST_CASE("packed SFT keeps whole samples together and their masks", "[core][data]") {
  temp_dir tmp;
  tmp.write("sft.jsonl", "{\"q\": \"a\", \"a\": \"b\"}\n{\"q\": \"c\", \"a\": \"d\"}\n{\"q\": \"e\", \"a\": \"f\"}\n");
  byte_tokenizer tok;
  auto o = options_for(tmp.path("sft.jsonl"), tmp.path("out"), 9);
  o.template_text = "{q}{a}";
  o.layout = "pack";
  build_dataset(o, tok);
  dataset ds(tmp.path("out"));
  REQUIRE(ds.size() == 2);  // two 4-token records fit in 9, the third starts a new block
  CHECK(ds.sample_tokens(0) == std::vector<std::int64_t>{1, 3 + 'a', 3 + 'b', 2, 1, 3 + 'c', 3 + 'd', 2});
  CHECK(ds.sample_loss_mask(0) == std::vector<std::uint8_t>{0, 0, 1, 1, 0, 0, 1, 1});
  CHECK(ds.sample_length(1) == 4);
}

TEST_CASE("the built dataset does not depend on the number of tokenizer threads", "[core][data]") {
  temp_dir tmp;
  std::string jsonl;
  for (int i = 0; i < 2000; ++i)
    jsonl += "{\"q\": \"question " + std::to_string(i) + "\", \"a\": \"" + std::string(static_cast<std::size_t>(i % 13), 'z') + "\"}\n";
  tmp.write("sft.jsonl", jsonl);
  std::string manifests[2];
  for (int threads : {1, 4}) {
    byte_tokenizer tok;
    auto o = options_for(tmp.path("sft.jsonl"), tmp.path("out" + std::to_string(threads)), 32);
    o.template_text = "{q}\n{a}";
    o.threads = threads;
    o.chunk_bytes = 512;
    o.shard_tokens = 4096;
    manifests[threads == 1 ? 0 : 1] = manifest_to_json(build_dataset(o, tok).result);
  }
  // Equal checksums of every shard file: byte-identical output.
  CHECK(manifests[0].substr(manifests[0].find("\"shards\"")) == manifests[1].substr(manifests[1].find("\"shards\"")));
}

TEST_CASE("bad builder input gets errors naming the file, line and field", "[core][data]") {
  temp_dir tmp;
  byte_tokenizer tok;
  tmp.write("bad.jsonl", "{\"q\": \"x\", \"a\": \"y\"}\n{\"q\": \"x\"\n");
  auto o = options_for(tmp.path("bad.jsonl"), tmp.path("out"), 16);
  o.template_text = "{q}{a}";
  CHECK_THROWS_WITH(build_dataset(o, tok), Catch::Contains("bad.jsonl:2") && Catch::Contains("invalid JSON"));
  tmp.write("missing.jsonl", "{\"q\": \"x\"}\n");
  o.input = tmp.path("missing.jsonl");
  CHECK_THROWS_WITH(build_dataset(o, tok), Catch::Contains("missing.jsonl:1") && Catch::Contains("\"a\""));
  o.template_text.clear();
  CHECK_THROWS_WITH(build_dataset(o, tok), Catch::Contains("--field"));
  o.field = "text";
  o.template_text = "{q}";
  CHECK_THROWS_WITH(build_dataset(o, tok), Catch::Contains("exclude"));
  o.template_text = "{q";
  o.field.clear();
  CHECK_THROWS_WITH(build_dataset(o, tok), Catch::Contains("unclosed"));
  o.input = tmp.path("nowhere");
  CHECK_THROWS_WITH(build_dataset(o, tok), Catch::Contains("nowhere"));
  tmp.write("tokens.json", "[\"<A>\"]");
  o = options_for(tmp.path("missing.jsonl"), tmp.path("out"), 16);
  o.field = "q";
  o.special_tokens_file = tmp.path("tokens.json");
  CHECK_THROWS_WITH(build_dataset(o, tok), Catch::Contains("tokens.json"));
}

TEST_CASE("templates understand escapes, literal braces and non-string values", "[core][data]") {
  sft_template t("{{{id}}}\\t{q}\\n{a}!");
  const auto r = t.render(nlohmann::json{{"id", 7}, {"q", "why"}, {"a", "because"}}, "rec");
  CHECK(r.prompt == "{7}\twhy\n");
  CHECK(r.completion == "because!");
  CHECK(t.fields() == std::vector<std::string>{"id", "q", "a"});
  CHECK_THROWS_WITH(sft_template("no fields"), Catch::Contains("placeholder"));
  CHECK_THROWS_WITH(t.render(nlohmann::json{{"id", 1}, {"q", "x"}, {"a", nullptr}}, "f.jsonl:3"),
                    Catch::Contains("f.jsonl:3") && Catch::Contains("\"a\""));
}

TEST_CASE("padded pretraining keeps one document per sample and counts the truncated ones", "[core][data]") {
  temp_dir tmp;
  tmp.write("docs/a.txt", "short");
  tmp.write("docs/b.txt", "this document is longer than the sequence");
  byte_tokenizer tok;
  auto o = options_for(tmp.path("docs"), tmp.path("out"), 10);
  o.layout = "pad";
  const auto report = build_dataset(o, tok);
  dataset ds(tmp.path("out"));
  REQUIRE(ds.size() == 2);
  std::vector<std::int64_t> first{1};
  for (auto t : bytes_of("short")) first.push_back(t);
  first.push_back(2);
  CHECK(ds.sample_tokens(0) == first);
  CHECK(ds.sample_length(1) == 10);
  CHECK(report.result.truncated_samples == 1);
  CHECK(report.result.truncated_tokens == 1 + 41 + 1 - 10);
}
