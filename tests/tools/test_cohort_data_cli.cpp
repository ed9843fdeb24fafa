// The cohort-data command-line contracts (build, seq2seq build, inspect, plan, batches, verify), run as a process.
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/data/dataset.hpp"
#include "core/data/shard_writer.hpp"
#include "tests/support/json_lines.hpp"
#include "tests/support/shared_data.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/tool_run.hpp"

using cohort::test::parse_json_lines;
using cohort::test::run_tool;
using cohort::test::temp_dir;
using nlohmann::json;
namespace cd = cohort::core::data;

namespace {

// cohort-data with `arguments` (shell-quoted by the caller).
cohort::test::tool_result cohort_data(const std::string& arguments) { return run_tool("cohort-data", arguments); }

// n samples of 1..8 tokens each, no mask.
std::string write_dataset(const temp_dir& tmp, int n) {
  const auto dir = tmp.path("ds");
  cd::prepare_output_dir(dir);
  cd::shard_writer_options o;
  o.vocab_size = 500;
  o.shard_tokens = 256;
  cd::shard_writer w(dir, o);
  for (int i = 0; i < n; ++i) {
    const std::vector<std::int32_t> ids(static_cast<std::size_t>(1 + i % 8), i % 500);
    w.append(ids.data(), static_cast<std::int64_t>(ids.size()), nullptr);
  }
  cd::manifest m;
  m.kind = "pretrain";
  m.layout = "pack";
  m.seq_len = 8;
  m.eos_id = 2;
  w.finish(m);
  return dir;
}

std::string geometry(int w, int b, int g) {
  return " --world-size " + std::to_string(w) + " --micro-batch " + std::to_string(b) + " --grad-accum " +
         std::to_string(g);
}

}  // namespace

TEST_CASE("cohort-data inspect and plan print the contract's JSON fields", "[tools][data]") {
  temp_dir tmp;
  const auto dir = write_dataset(tmp, 1000);
  const auto inspect = cohort_data("inspect " + dir);
  REQUIRE(inspect.code == 0);
  const auto info = json::parse(inspect.out);
  CHECK(info["samples"] == 1000);
  CHECK(info["tokens"] == 125 * 36);
  CHECK(info["seq_len"] == 8);
  CHECK(info["vocab_size"] == 500);
  const auto plan = cohort_data("plan " + dir + geometry(4, 2, 3) + " --epochs 2");
  REQUIRE(plan.code == 0);
  const auto p = json::parse(plan.out);
  CHECK(p["samples"] == 1000);
  CHECK(p["global_batch"] == 24);
  CHECK(p["steps_per_epoch"] == 41);
  CHECK(p["total_steps"] == 82);
  CHECK(p["dropped_per_epoch"] == 16);
}

TEST_CASE("cohort-data batches: same global batch on 1, 2, 4, 8 ranks gives the same disjoint step slices",
          "[tools][data]") {
  temp_dir tmp;
  const auto dir = write_dataset(tmp, 200);
  const std::vector<std::array<int, 3>> geometries{{1, 2, 8}, {2, 4, 2}, {4, 1, 4}, {8, 2, 1}};
  std::vector<std::vector<std::int64_t>> reference;  // per step, sorted union
  for (const auto& [w, b, g] : geometries) {
    std::vector<std::vector<std::int64_t>> unions(12);
    for (int r = 0; r < w; ++r) {
      const auto res = cohort_data("batches " + dir + geometry(w, b, g) + " --rank " + std::to_string(r) +
                                       " --seed 77 --start-step 0 --steps 12");
      REQUIRE(res.code == 0);
      const auto lines = parse_json_lines(res.out);
      REQUIRE(lines.size() == 12);
      for (int k = 0; k < 12; ++k) {
        CHECK(lines[static_cast<std::size_t>(k)]["step"] == k);
        const auto part = lines[static_cast<std::size_t>(k)]["samples"].get<std::vector<std::int64_t>>();
        CHECK(part.size() == static_cast<std::size_t>(b * g));
        unions[static_cast<std::size_t>(k)].insert(unions[static_cast<std::size_t>(k)].end(), part.begin(), part.end());
      }
    }
    for (auto& u : unions) {
      std::sort(u.begin(), u.end());
      CHECK(std::adjacent_find(u.begin(), u.end()) == u.end());
      CHECK(u.size() == 16);
    }
    if (reference.empty()) reference = unions;
    CHECK(unions == reference);
  }
  // 12 steps of 16 cover 192 of the 200 samples exactly once (the epoch's remainder of 8 is dropped).
  std::vector<std::int64_t> epoch;
  for (const auto& u : reference) epoch.insert(epoch.end(), u.begin(), u.end());
  std::sort(epoch.begin(), epoch.end());
  CHECK(std::adjacent_find(epoch.begin(), epoch.end()) == epoch.end());
  CHECK(epoch.size() == 192);
}

TEST_CASE("cohort-data batches --start-step K prints what continuing from step 0 prints at K", "[tools][data]") {
  temp_dir tmp;
  const auto dir = write_dataset(tmp, 100);
  const auto all = parse_json_lines(cohort_data("batches " + dir + geometry(2, 3, 2) + " --rank 1 --seed 5 --start-step 0 --steps 20").out);
  const auto resumed = parse_json_lines(cohort_data("batches " + dir + geometry(2, 3, 2) + " --rank 1 --seed 5 --start-step 13 --steps 7").out);
  REQUIRE(all.size() == 20);
  REQUIRE(resumed.size() == 7);
  for (std::size_t i = 0; i < 7; ++i) CHECK(resumed[i] == all[13 + i]);
}

TEST_CASE("cohort-data verify exits 1 naming the corrupt shard, 0 when intact", "[tools][data]") {
  temp_dir tmp;
  const auto dir = write_dataset(tmp, 300);
  CHECK(cohort_data("verify " + dir).code == 0);
  {
    std::fstream f(dir + "/shard-00002.tokens", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(3);
    f.put('\x7f');
  }
  const auto bad = cohort_data("verify " + dir);
  CHECK(bad.code == 1);
  CHECK_THAT(bad.err, Catch::Contains("shard-00002.tokens"));
}

TEST_CASE("cohort-data rejects usage errors and bad input with exit code 2", "[tools][data]") {
  temp_dir tmp;
  const auto dir = write_dataset(tmp, 50);
  CHECK(cohort_data("").code == 2);
  CHECK(cohort_data("frobnicate").code == 2);
  CHECK(cohort_data("plan " + dir + " --world-size 2").code == 2);
  const auto rank = cohort_data("batches " + dir + geometry(2, 1, 1) + " --rank 2 --seed 1");
  CHECK(rank.code == 2);
  CHECK_THAT(rank.err, Catch::Contains("--rank"));
  CHECK(cohort_data("plan " + dir + geometry(8, 4, 4)).code == 2);  // global batch 128 > 50 samples
  const auto missing = cohort_data("inspect " + tmp.path("nope"));
  CHECK(missing.code == 2);
  CHECK_THAT(missing.err, Catch::Contains("manifest.json"));
  CHECK(cohort_data("build --input x").code == 2);
  CHECK(cohort_data("plan --help").code == 0);
}

TEST_CASE("cohort-data build --template-source/--template-target writes a seq2seq set that inspect, plan and verify read",
          "[tools][data]") {
  temp_dir tmp;
  tmp.write("qa.jsonl",
            "{\"question\": \"Tom has 3 pens and buys 4 more. How many pens?\", \"answer\": \"3 + 4 = <<3+4=7>>7\\n#### 7\"}\n"
            "{\"question\": \"Ann reads 5 pages a day for 6 days. How many pages?\", \"answer\": \"5 * 6 = <<5*6=30>>30\\n#### 30\"}\n"
            "{\"question\": \"" + std::string(200, 'x') + "\", \"answer\": \"cut\"}\n");
  const std::string tok = COHORT_SOURCE_DIR "/examples/quickstart/tokenizer.json";
  const std::string base = "build --input " + tmp.path("qa.jsonl") + " --tokenizer " + tok +
                           " --template-source 'question: {question}' --template-target '{answer}' --quiet";
  const auto built = cohort_data(base + " --source-len 64 --target-len 32 --out " + tmp.path("s2s"));
  REQUIRE(built.code == 0);
  CHECK_THAT(built.err, Catch::Contains("1 sources cut to --source-len 64") &&
                            Catch::Contains("0 targets cut to --target-len 32") && Catch::Contains("0 records skipped"));
  const auto info = json::parse(cohort_data("inspect " + tmp.path("s2s")).out);
  CHECK(info["kind"] == "seq2seq");
  CHECK(info["format_version"] == 2);
  CHECK(info["samples"] == 3);
  CHECK(info["source_len"] == 64);
  CHECK(info["target_len"] == 32);
  CHECK(info["truncated_samples"] == 1);
  CHECK(info["over_long"] == "truncate");
  const auto plan = json::parse(cohort_data("plan " + tmp.path("s2s") + geometry(1, 1, 1)).out);
  CHECK(plan["tokens_per_step"] == 64 + 32);
  CHECK(cohort_data("verify " + tmp.path("s2s")).code == 0);

  const auto skipped = cohort_data(base + " --source-len 64 --target-len 32 --over-long skip --out " + tmp.path("skip"));
  REQUIRE(skipped.code == 0);
  CHECK(json::parse(cohort_data("inspect " + tmp.path("skip")).out)["skipped_samples"] == 1);
  const auto refused = cohort_data(base + " --source-len 64 --target-len 32 --over-long error --out " + tmp.path("err"));
  CHECK(refused.code == 2);
  CHECK_THAT(refused.err, Catch::Contains("qa.jsonl:3") && Catch::Contains("over --source-len 64"));

  const auto with_seq_len = cohort_data(base + " --seq-len 64 --target-len 32 --out " + tmp.path("bad"));
  CHECK(with_seq_len.code == 2);
  CHECK_THAT(with_seq_len.err, Catch::Contains("not --seq-len"));
  CHECK(cohort_data(base + " --source-len 64 --out " + tmp.path("bad")).code == 2);
  const auto stray = cohort_data("build --input " + tmp.path("qa.jsonl") + " --tokenizer " + tok +
                                 " --template '{question} {answer}' --seq-len 64 --target-len 8 --out " + tmp.path("bad"));
  CHECK(stray.code == 2);
  CHECK_THAT(stray.err, Catch::Contains("--target-len applies to seq2seq data"));
}

TEST_CASE("cohort-data build writes a dataset from SFT jsonl and from text with a real tokenizer", "[tools][data]") {
  COHORT_SKIP_WITHOUT_SHARED("data/llama2-tokenizer.model");
  const std::string model = cohort::test::shared_file("data/llama2-tokenizer.model");
  temp_dir tmp;
  tmp.write("sft.jsonl",
            "{\"q\": \"What is 2+2?\", \"a\": \"<BOT> 4\"}\n{\"q\": \"Name a colour.\", \"a\": \"Blue.\"}\n"
            "{\"q\": \"" + std::string(300, 'x') + "\", \"a\": \"cut\"}\n");
  tmp.write("tokens.json", "{\"tokens\": [\"<USER>\", \"<BOT>\"]}");
  const auto sft = cohort_data("build --input " + tmp.path("sft.jsonl") + " --tokenizer " + model +
                                   " --template '<USER>{q}\\n{a}' --special-tokens " + tmp.path("tokens.json") +
                                   " --seq-len 64 --pad --out " + tmp.path("sft"));
  REQUIRE(sft.code == 0);
  CHECK_THAT(sft.err, Catch::Contains("1 samples longer than --seq-len 64 were truncated"));
  const auto info = json::parse(cohort_data("inspect " + tmp.path("sft")).out);
  CHECK(info["samples"] == 3);
  CHECK(info["seq_len"] == 64);
  CHECK(info["vocab_size"] == 32002);
  CHECK(info["truncated_samples"] == 1);
  CHECK(info["has_loss_mask"] == true);
  CHECK(cohort_data("verify " + tmp.path("sft")).code == 0);

  tmp.write("book.txt", "It was the best of times, it was the worst of times.\n");
  const auto text = cohort_data("build --input " + tmp.path("book.txt") + " --tokenizer " + model +
                                    " --seq-len 8 --pack --quiet --out " + tmp.path("text"));
  REQUIRE(text.code == 0);
  const auto t = json::parse(cohort_data("inspect " + tmp.path("text")).out);
  CHECK(t["kind"] == "pretrain");
  CHECK(t["samples"] == (t["tokens"].get<int>() + 7) / 8);

  CHECK(cohort_data("build --input " + tmp.path("sft.jsonl") + " --tokenizer " + model +
                        " --template '{q' --seq-len 8 --out " + tmp.path("bad")).code == 2);
  CHECK(cohort_data("build --input " + tmp.path("book.txt") + " --tokenizer " + tmp.path("none.model") +
                        " --seq-len 8 --out " + tmp.path("bad")).code == 2);
  CHECK(cohort_data("build --input " + tmp.path("book.txt") + " --tokenizer " + model +
                        " --seq-len 8 --pack --pad --out " + tmp.path("bad")).code == 2);
}

TEST_CASE("cohort-data build tokenizes text with T5's Unigram tokenizer.json, ending each record with </s>",
          "[tools][data]") {
  const std::string tokenizer = std::string(COHORT_SOURCE_DIR) + "/tests/core/tokenizer/data/t5-unigram/tokenizer.json";
  temp_dir tmp;
  tmp.write("book.txt", "Hello world.");
  const auto built = cohort_data("build --input " + tmp.path("book.txt") + " --tokenizer " + tokenizer +
                                 " --seq-len 8 --pack --quiet --out " + tmp.path("t5"));
  REQUIRE(built.code == 0);
  const auto info = json::parse(cohort_data("inspect " + tmp.path("t5")).out);
  CHECK(info["vocab_size"] == 410);
  CHECK(info["eos_id"] == 1);
  CHECK(info["bos_id"].is_null());
  // transformers' T5Tokenizer ids for "Hello world." with add_special_tokens (the t5-unigram fixture).
  const cd::dataset ds(tmp.path("t5"));
  REQUIRE(ds.size() == 1);
  CHECK(ds.sample_tokens(0) == std::vector<std::int64_t>{159, 77, 10, 164, 20, 7, 13, 1});
}
