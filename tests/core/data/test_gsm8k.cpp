// Done-when for SFT builds: gsm8k-train.jsonl with the Llama 2 sentencepiece model and a
// question/answer template gives one sample per line, the answer (and EOS) in the loss, the prompt
// masked out.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/data/build/builder.hpp"
#include "core/data/dataset.hpp"
#include "core/data/verify.hpp"
#include "core/tokenizer/tokenizer.hpp"
#include "tests/support/json_lines.hpp"
#include "tests/support/shared_data.hpp"
#include "tests/support/temp_dir.hpp"

using namespace cohort::core::data;
using cohort::test::shared_file;
using cohort::test::temp_dir;

TEST_CASE("gsm8k train builds into 7473 SFT samples with answers in the loss and prompts masked", "[core][data]") {
  COHORT_SKIP_WITHOUT_SHARED("data/llama2-tokenizer.model");
  COHORT_SKIP_WITHOUT_SHARED("data/gsm8k-train.jsonl");
  const auto jsonl = shared_file("data/gsm8k-train.jsonl");
  const auto model = shared_file("data/llama2-tokenizer.model");
  temp_dir tmp;
  auto tok = cohort::core::tokenizer::load_tokenizer(model);
  build_options o;
  o.input = jsonl;
  o.tokenizer_path = model;
  o.template_text = "{question}\\n{answer}";
  o.seq_len = 1024;
  o.out_dir = tmp.path("gsm8k");
  o.progress = false;
  const auto report = build_dataset(o, *tok);
  CHECK(report.result.records == 7473);
  CHECK(report.result.truncated_samples == 0);

  dataset ds(tmp.path("gsm8k"));
  REQUIRE(ds.size() == 7473);
  CHECK(ds.info().kind == "sft");
  CHECK(ds.info().has_loss_mask);
  CHECK(ds.info().vocab_size == 32000);
  CHECK(ds.info().token_bytes == 2);
  CHECK(ds.info().loss_tokens > 0);
  CHECK(ds.info().loss_tokens < ds.info().tokens);
  CHECK(verify_dataset(tmp.path("gsm8k")).empty());

  const auto lines = cohort::test::read_json_lines(jsonl);
  REQUIRE(lines.size() == 7473);
  const auto bos = *tok->bos_id();
  const auto eos = *tok->eos_id();
  for (std::int64_t i : {0, 1, 4000, 7472}) {
    const auto& rec = lines[static_cast<std::size_t>(i)];
    const auto prompt = tok->encode(rec["question"].get<std::string>() + "\n");
    const auto answer = tok->encode(rec["answer"].get<std::string>());
    std::vector<std::int64_t> expected{bos};
    expected.insert(expected.end(), prompt.begin(), prompt.end());
    expected.insert(expected.end(), answer.begin(), answer.end());
    expected.push_back(eos);
    const auto tokens = ds.sample_tokens(i);
    const auto mask = ds.sample_loss_mask(i);
    REQUIRE(tokens == expected);
    std::vector<std::uint8_t> expected_mask(1 + prompt.size(), 0);
    expected_mask.resize(expected.size(), 1);
    CHECK(mask == expected_mask);
    // The labelled tokens decode to the answer text.
    std::vector<cohort::core::tokenizer::token_id> labelled;
    for (std::size_t t = 0; t + 1 < tokens.size(); ++t)
      if (mask[t]) labelled.push_back(static_cast<cohort::core::tokenizer::token_id>(tokens[t]));
    CHECK(tok->decode(labelled) == rec["answer"].get<std::string>());
  }
}
