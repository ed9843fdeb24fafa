// Tests of seq2seq data: source/target jsonl into two token streams, read back as T5 batches.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/data/batch_loader.hpp"
#include "core/data/build/builder.hpp"
#include "core/data/dataset.hpp"
#include "core/data/verify.hpp"
#include "core/train/job_preflight.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "tests/core/data/byte_tokenizer.hpp"
#include "tests/support/files.hpp"
#include "tests/support/temp_dir.hpp"

using namespace cohort::core::data;
using cohort::core::data::testing::byte_tokenizer;
using cohort::core::tokenizer::load_tokenizer;
using cohort::test::temp_dir;
using nlohmann::json;

namespace {

const std::string quickstart_tokenizer = COHORT_SOURCE_DIR "/examples/quickstart/tokenizer.json";

// GSM8K-shaped lines: a word problem and a worked answer ending in "#### N".
std::vector<json> word_problems(int n) {
  std::vector<json> out;
  for (int i = 0; i < n; ++i) {
    const std::string a = std::to_string(3 + i), b = std::to_string(2 * i + 1);
    out.push_back({{"question", "Sam has " + a + " apples and buys " + b + " more. How many apples does Sam have?"},
                   {"answer", "Sam has " + a + " + " + b + " = <<" + a + "+" + b + "=" +
                                  std::to_string(3 + i + 2 * i + 1) + ">> apples.\n#### " +
                                  std::to_string(3 + i + 2 * i + 1)}});
  }
  return out;
}

std::string write_jsonl(const temp_dir& tmp, const std::string& name, const std::vector<json>& lines) {
  std::string text;
  for (const auto& l : lines) text += l.dump() + "\n";
  return tmp.write(name, text);
}

build_options seq2seq_options(const std::string& input, const std::string& out, std::int64_t source_len,
                              std::int64_t target_len) {
  build_options o;
  o.input = input;
  o.out_dir = out;
  o.tokenizer_path = "test";
  o.template_source = "question: {question}";
  o.template_target = "{answer}";
  o.seq_len = source_len;
  o.target_len = target_len;
  o.progress = false;
  o.threads = 2;
  o.chunk_bytes = 256;  // several chunks, so the in-order writer is exercised
  return o;
}

std::vector<std::int64_t> widen(const std::vector<std::int32_t>& ids) { return {ids.begin(), ids.end()}; }

// A seq2seq data set of `n` word problems through the byte tokenizer (no post-processor).
std::shared_ptr<const dataset> byte_dataset(const temp_dir& tmp, int n, std::int64_t source_len,
                                            std::int64_t target_len) {
  byte_tokenizer tok;
  build_dataset(seq2seq_options(write_jsonl(tmp, "in.jsonl", word_problems(n)), tmp.path("ds"), source_len, target_len),
                tok);
  return std::make_shared<const dataset>(tmp.path("ds"));
}

loader_options seq2seq_loader(const batch_geometry& g, std::int64_t rank, std::uint64_t seed) {
  loader_options o;
  o.geometry = g;
  o.rank = rank;
  o.seed = seed;
  o.kind = batch_kind::seq2seq;
  return o;
}

// The rows of every micro-batch of `steps` steps, for all ranks of `geometry` in rank order: per
// step, each global sample's (sample id, input ids, attention mask, labels).
struct row {
  std::int64_t sample;
  std::vector<std::int64_t> input_ids, attention_mask, labels;
  bool operator==(const row& o) const {
    return sample == o.sample && input_ids == o.input_ids && attention_mask == o.attention_mask && labels == o.labels;
  }
};

std::vector<std::vector<row>> global_rows(const std::shared_ptr<const dataset>& ds, const batch_geometry& g,
                                          std::int64_t steps) {
  std::vector<std::vector<row>> out(static_cast<std::size_t>(steps));
  for (std::int64_t r = 0; r < g.world_size; ++r) {
    batch_loader loader(ds, seq2seq_loader(g, r, 31));
    seq2seq_batch b;
    for (std::int64_t k = 0; k < steps * g.grad_accum; ++k) {
      loader.next(b);
      for (std::int64_t i = 0; i < b.batch_size; ++i) {
        const auto S = b.source_len, T = b.target_len;
        out[static_cast<std::size_t>(b.step)].push_back(
            {b.sample_ids[static_cast<std::size_t>(i)],
             {b.input_ids.begin() + i * S, b.input_ids.begin() + (i + 1) * S},
             {b.attention_mask.begin() + i * S, b.attention_mask.begin() + (i + 1) * S},
             {b.labels.begin() + i * T, b.labels.begin() + (i + 1) * T}});
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("a seq2seq jsonl built with the quick-start tokenizer reads back exactly its source and target ids",
          "[core][data][seq2seq]") {
  temp_dir tmp;
  const auto lines = word_problems(12);
  const auto tok = load_tokenizer(quickstart_tokenizer);
  const auto report = build_dataset(
      seq2seq_options(write_jsonl(tmp, "gsm.jsonl", lines), tmp.path("ds"), 512, 512), *tok);
  CHECK(report.result.kind == "seq2seq");
  CHECK(report.result.version == 2);
  const dataset ds(tmp.path("ds"));
  REQUIRE(ds.is_seq2seq());
  REQUIRE(ds.size() == 12);
  CHECK(ds.seq_len() == 512);
  CHECK(ds.target_len() == 512);
  CHECK_FALSE(ds.info().bos_id.has_value());
  std::int64_t source_tokens = 0, target_tokens = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto source = tok->encode("question: " + lines[i]["question"].get<std::string>());
    const auto target = tok->encode(lines[i]["answer"].get<std::string>());
    CHECK(ds.sample_tokens(static_cast<std::int64_t>(i)) == widen(source));
    CHECK(ds.target_tokens(static_cast<std::int64_t>(i)) == widen(target));
    CHECK(tok->decode(source) == "question: " + lines[i]["question"].get<std::string>());
    source_tokens += static_cast<std::int64_t>(source.size());
    target_tokens += static_cast<std::int64_t>(target.size());
  }
  CHECK(ds.info().tokens == source_tokens);
  CHECK(ds.info().seq2seq->target_tokens == target_tokens);
  CHECK(ds.info().truncated_samples == 0);
  CHECK(ds.info().seq2seq->truncated_samples == 0);
  CHECK(verify_dataset(tmp.path("ds")).empty());
}

TEST_CASE("the tokenizer's post-processor puts its special tokens on source and target, kept when truncating",
          "[core][data][seq2seq]") {
  temp_dir tmp;
  // The quick-start tokenizer with T5's kind of post-processor: "$A <|endoftext|>".
  auto spec = json::parse(cohort::test::read_file(quickstart_tokenizer));
  spec["post_processor"] = json::parse(R"({"type": "TemplateProcessing",
      "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}],
      "pair": [],
      "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [256], "tokens": ["<|endoftext|>"]}}})");
  const auto tok = load_tokenizer(tmp.write("tok/tokenizer.json", spec.dump()));
  const auto lines = word_problems(4);
  build_dataset(seq2seq_options(write_jsonl(tmp, "in.jsonl", lines), tmp.path("ds"), 512, 16), *tok);
  const dataset ds(tmp.path("ds"));
  for (std::int64_t i = 0; i < 4; ++i) {
    auto source = widen(tok->encode("question: " + lines[static_cast<std::size_t>(i)]["question"].get<std::string>()));
    source.push_back(256);
    CHECK(ds.sample_tokens(i) == source);
    // Targets run past 16 tokens: 15 of the text, then the post-processor's <|endoftext|>.
    auto target = widen(tok->encode(lines[static_cast<std::size_t>(i)]["answer"].get<std::string>()));
    REQUIRE(target.size() > 15);
    target.resize(15);
    target.push_back(256);
    CHECK(ds.target_tokens(i) == target);
  }
  CHECK(ds.info().seq2seq->truncated_samples == 4);
  CHECK(ds.info().truncated_samples == 0);
}

TEST_CASE("over-long records are truncated, skipped or refused as --over-long says, and counted",
          "[core][data][seq2seq]") {
  temp_dir tmp;
  std::vector<json> lines{{{"question", "short"}, {"answer", "ok"}},
                          {{"question", "a question far too long"}, {"answer", "ok"}},
                          {{"question", "short"}, {"answer", "an answer that is too long"}}};
  const auto input = write_jsonl(tmp, "in.jsonl", lines);
  byte_tokenizer tok;
  auto o = seq2seq_options(input, tmp.path("cut"), 15, 8);  // "question: short" is 15 bytes
  const auto cut = build_dataset(o, tok).result;
  CHECK(cut.samples == 3);
  CHECK(cut.truncated_samples == 1);
  CHECK(cut.truncated_tokens == 10 + 23 - 15);
  CHECK(cut.seq2seq->truncated_samples == 1);
  CHECK(cut.seq2seq->truncated_tokens == 26 - 8);
  CHECK(cut.seq2seq->over_long == "truncate");
  const dataset ds(tmp.path("cut"));
  CHECK(ds.sample_length(1) == 15);
  CHECK(ds.target_length(2) == 8);

  o.over_long = "skip";
  o.out_dir = tmp.path("skip");
  const auto skip = build_dataset(o, tok).result;
  CHECK(skip.records == 3);
  CHECK(skip.samples == 1);
  CHECK(skip.seq2seq->skipped_samples == 2);
  CHECK(skip.truncated_samples == 0);

  o.over_long = "error";
  o.out_dir = tmp.path("error");
  CHECK_THROWS_WITH(build_dataset(o, tok), Catch::Contains("in.jsonl:2") && Catch::Contains("source is 33 tokens") &&
                                               Catch::Contains("--source-len 15"));
  o.over_long = "drop";
  CHECK_THROWS_WITH(build_dataset(o, tok), Catch::Contains("--over-long \"drop\" is not one of truncate, skip, error"));
}

TEST_CASE("a missing template field is an error naming the file:line and the field", "[core][data][seq2seq]") {
  temp_dir tmp;
  auto lines = word_problems(5);
  lines[2].erase("answer");
  byte_tokenizer tok;
  const auto o = seq2seq_options(write_jsonl(tmp, "broken.jsonl", lines), tmp.path("ds"), 256, 256);
  CHECK_THROWS_WITH(build_dataset(o, tok),
                    Catch::Contains("broken.jsonl:3") &&
                        Catch::Contains("missing field \"answer\" required by --template-target"));
  auto bad = o;
  bad.template_source = "{question";
  CHECK_THROWS_WITH(build_dataset(bad, tok), Catch::Contains("--template-source \"{question\""));
  bad = o;
  bad.template_target.clear();
  CHECK_THROWS_WITH(build_dataset(bad, tok), Catch::Contains("needs both --template-source and --template-target"));
}

TEST_CASE("seq2seq batches hold input_ids with an attention mask and labels with -100 at padding",
          "[core][data][seq2seq]") {
  temp_dir tmp;
  const auto ds = byte_dataset(tmp, 20, 64, 48);
  batch_loader loader(ds, seq2seq_loader({1, 4, 1}, 0, 3));
  seq2seq_batch b;
  loader.next(b);
  REQUIRE(b.batch_size == 4);
  REQUIRE(b.source_len == 64);
  REQUIRE(b.target_len == 48);
  REQUIRE(b.input_ids.size() == 4 * 64);
  REQUIRE(b.labels.size() == 4 * 48);
  for (std::int64_t i = 0; i < 4; ++i) {
    const auto id = b.sample_ids[static_cast<std::size_t>(i)];
    const auto source = ds->sample_tokens(id);
    const auto target = ds->target_tokens(id);
    CHECK(b.source_lengths[static_cast<std::size_t>(i)] == static_cast<std::int64_t>(source.size()));
    CHECK(b.target_lengths[static_cast<std::size_t>(i)] == static_cast<std::int64_t>(target.size()));
    for (std::size_t t = 0; t < 64; ++t) {
      const auto k = static_cast<std::size_t>(i * 64) + t;
      CHECK(b.input_ids[k] == (t < source.size() ? source[t] : ds->info().pad_id));
      CHECK(b.attention_mask[k] == (t < source.size() ? 1 : 0));
    }
    for (std::size_t t = 0; t < 48; ++t)
      CHECK(b.labels[static_cast<std::size_t>(i * 48) + t] == (t < target.size() ? target[t] : -100));
  }
}

TEST_CASE("1, 2 and 3 ranks see the same global seq2seq samples in the same order", "[core][data][seq2seq]") {
  temp_dir tmp;
  const auto ds = byte_dataset(tmp, 40, 64, 48);
  const auto one = global_rows(ds, {1, 6, 1}, 6);  // one epoch: 6 steps of 6
  CHECK(one == global_rows(ds, {2, 3, 1}, 6));
  CHECK(one == global_rows(ds, {3, 1, 2}, 6));
  std::vector<std::int64_t> seen;
  for (const auto& step : one)
    for (const auto& r : step) seen.push_back(r.sample);
  std::sort(seen.begin(), seen.end());
  CHECK(std::adjacent_find(seen.begin(), seen.end()) == seen.end());  // each sample at most once an epoch
  CHECK(seen.size() == 36);
}

TEST_CASE("a seq2seq loader resumed from a saved step reads exactly what an uninterrupted one reads",
          "[core][data][seq2seq]") {
  temp_dir tmp;
  const auto ds = byte_dataset(tmp, 60, 64, 48);  // 7 steps of 8 an epoch
  const auto o = seq2seq_loader({2, 2, 2}, 1, 8);
  batch_loader straight(ds, o);
  REQUIRE(straight.steps_per_epoch() == 7);
  seq2seq_batch b;
  for (int k = 0; k < 2 * 10; ++k) straight.next(b);  // 10 steps: saved in the middle of epoch 1
  const std::int64_t saved = straight.step();
  REQUIRE(saved == 10);
  REQUIRE(straight.micro() == 0);
  batch_loader resumed(ds, o);
  resumed.seek(saved);
  seq2seq_batch r;
  for (int k = 0; k < 2 * 5; ++k) {  // on into epoch 2
    straight.next(b);
    resumed.next(r);
    CHECK(r.step == b.step);
    CHECK(r.micro == b.micro);
    CHECK(r.sample_ids == b.sample_ids);
    CHECK(r.input_ids == b.input_ids);
    CHECK(r.attention_mask == b.attention_mask);
    CHECK(r.labels == b.labels);
  }
}

TEST_CASE("verify catches a corrupted target shard of a seq2seq data set", "[core][data][seq2seq]") {
  temp_dir tmp;
  byte_tokenizer tok;
  auto o = seq2seq_options(write_jsonl(tmp, "in.jsonl", word_problems(30)), tmp.path("ds"), 64, 64);
  o.shard_tokens = 1000;  // several shards
  build_dataset(o, tok);
  REQUIRE(read_manifest(tmp.path("ds")).shards.size() > 2);
  CHECK(verify_dataset(tmp.path("ds")).empty());
  CHECK(verify_checksums(tmp.path("ds"), 2).files == 4 * read_manifest(tmp.path("ds")).shards.size());
  {
    std::fstream f(tmp.path("ds/shard-00001.target_tokens"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4);
    f.put('\x41');
  }
  const auto problems = verify_dataset(tmp.path("ds"));
  REQUIRE(problems.size() == 1);
  CHECK_THAT(problems[0].file, Catch::EndsWith("shard-00001.target_tokens"));
  CHECK_THAT(problems[0].message, Catch::Contains("checksum mismatch"));
  CHECK_THROWS_WITH(verify_checksums(tmp.path("ds"), 2), Catch::Contains("shard-00001.target_tokens"));
  // A missing target index is found on opening, without checksums.
  std::filesystem::remove(tmp.path("ds/shard-00002.target_index"));
  CHECK_THROWS_WITH(dataset(tmp.path("ds")), Catch::Contains("shard-00002.target_index") && Catch::Contains("missing"));
}

TEST_CASE("a decoder loader refuses a seq2seq data set and a seq2seq loader refuses decoder data",
          "[core][data][seq2seq]") {
  temp_dir tmp;
  const auto s2s = byte_dataset(tmp, 10, 64, 48);
  loader_options o;
  o.geometry = {1, 2, 1};
  CHECK_THROWS_WITH(batch_loader(s2s, o), Catch::Contains("a seq2seq data set") &&
                                              Catch::Contains("cannot train a decoder-only model"));
  tmp.write("sft.jsonl", "{\"q\": \"a\", \"a\": \"b\"}\n{\"q\": \"c\", \"a\": \"d\"}\n");
  byte_tokenizer tok;
  build_options sft;
  sft.input = tmp.path("sft.jsonl");
  sft.out_dir = tmp.path("sft");
  sft.template_text = "{q} {a}";
  sft.seq_len = 16;
  sft.tokenizer_path = "test";
  sft.progress = false;
  build_dataset(sft, tok);
  CHECK(read_manifest(tmp.path("sft")).version == 1);  // decoder data stays readable by older builds
  const auto decoder = std::make_shared<const dataset>(tmp.path("sft"));
  o.kind = batch_kind::seq2seq;
  CHECK_THROWS_WITH(batch_loader(decoder, o), Catch::Contains("\"sft\" data set has one token stream") &&
                                                  Catch::Contains("--template-source"));
  CHECK_THROWS_WITH(decoder->target_tokens(0), Catch::Contains("has no target (decoder) ids"));
}

TEST_CASE("seq2seq manifests are format_version 2, which a version-1 reader refuses, and other versions are refused",
          "[core][data][seq2seq]") {
  temp_dir tmp;
  byte_dataset(tmp, 4, 64, 48);
  const auto text = cohort::test::read_file(tmp.path("ds/manifest.json"));
  auto j = json::parse(text);
  CHECK(j["format_version"] == 2);
  CHECK(j["kind"] == "seq2seq");
  CHECK(j["seq2seq"]["target_len"] == 48);
  // Readers before seq2seq accepted exactly format_version 1 and refused others by number.
  CHECK(j["format_version"] != 1);
  j["format_version"] = 4;
  CHECK_THROWS_WITH(manifest_from_json(j.dump(), "m.json"),
                    Catch::Contains("format_version 4 is not supported (this build reads 1 to 3"));
  j["format_version"] = 3;  // the pairs data sets' version
  CHECK_THROWS_WITH(manifest_from_json(j.dump(), "m.json"), Catch::Contains("kind \"seq2seq\" with format_version 3"));
  j["format_version"] = 1;
  CHECK_THROWS_WITH(manifest_from_json(j.dump(), "m.json"),
                    Catch::Contains("kind \"seq2seq\" with format_version 1"));
  j["format_version"] = 2;
  j.erase("seq2seq");
  CHECK_THROWS_WITH(manifest_from_json(j.dump(), "m.json"), Catch::Contains("missing field \"seq2seq\""));
}

TEST_CASE("a causal_lm job refuses a seq2seq data.train at submit and on its workers", "[core][data][seq2seq]") {
  temp_dir tmp;
  byte_dataset(tmp, 8, 64, 48);
  cohort::config::job_spec spec;
  spec.data.train = tmp.path("ds");
  CHECK_THROWS_WITH(cohort::core::train::check_data_set(spec),
                    Catch::StartsWith("data.train: ") && Catch::Contains("is a seq2seq data set") &&
                        Catch::Contains("causal_lm trains decoder-only models"));
  spec.data.verify = false;
  CHECK_THROWS_WITH(cohort::core::train::verify_data_files(spec), Catch::Contains("is a seq2seq data set"));
}
