// Jobs that add special tokens (model.added_tokens, model.pad_vocab_to_multiple_of), as workers run
// them, against transformers' references (tests/core/model/fixtures/<family>/resized, written by
// generate_resized.py: the fixtures' 128 ids grown to 136 with pad_to_multiple_of 8): one SFT step
// on the new ids matches transformers' at ZeRO 0 and on two ranks at ZeRO 3 for every family; a
// run resumes with its grown vocabulary bitwise, and on another world size; LoRA trains the grown
// embedding and head; the export carries the grown model and a tokenizer with the added tokens at
// the data set's ids (read back through cohort's tokenizer, `cohort-model tokenize`); bad input is
// refused naming the field, the file and the fix.
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "config/job_spec.hpp"
#include "core/ckpt/layout.hpp"
#include "core/ckpt/reader.hpp"
#include "core/data/format.hpp"
#include "core/data/shard_writer.hpp"
#include "core/model/hf_io.hpp"
#include "core/model/vocab_resize.hpp"
#include "core/train/job_preflight.hpp"
#include "tests/core/model/model_test_support.hpp"
#include "tests/core/train/rank_checks.hpp"
#include "tests/core/train/workload_runs.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/tool_run.hpp"

#include "tests/support/catch_torch.hpp"

#include "tests/core/model/golden_support.hpp"

using namespace cohort;
using cohort::test::temp_dir;
using nlohmann::json;

using cohort::test::require_ok;

namespace {

const std::vector<std::string> families = {"gpt2-variant", "gptj",  "llama-variant", "mistral", "opt",
                                           "opt-prenorm",  "qwen2", "t5-v1_0",       "t5-v1_1"};
constexpr std::int64_t old_vocab = 128, grown_vocab = 136;

std::string fixture(const std::string& family) { return test::local_fixture(family); }
bool is_t5(const std::string& family) { return family.rfind("t5", 0) == 0; }

// "<T0>", "<T1>", ...: the added tokens of a test data set, ids 128 on.
std::vector<std::string> token_names(int count) {
  std::vector<std::string> out;
  for (int i = 0; i < count; ++i) out.push_back("<T" + std::to_string(i) + ">");
  return out;
}

std::string tokens_file(const temp_dir& tmp, const std::vector<std::string>& tokens,
                        const std::string& name = "tokens.json") {
  return tmp.write(name, json{{"tokens", tokens}}.dump());
}

// What `cohort-data build --special-tokens` records: the tokens, their ids from 128 on (unless
// `ids` is false: a data set of an older build), and the vocabulary they make.
void add_tokens(core::data::manifest& m, const std::vector<std::string>& tokens, bool ids = true) {
  m.special_tokens = tokens;
  if (ids)
    for (std::size_t i = 0; i < tokens.size(); ++i) m.special_token_ids.push_back(old_vocab + static_cast<std::int64_t>(i));
  m.vocab_size = old_vocab + static_cast<std::int64_t>(tokens.size());
}

using rows = std::vector<std::vector<std::int32_t>>;

rows rows_of(const json& matrix) {
  rows out;
  for (const auto& r : matrix) out.push_back(r.get<std::vector<std::int32_t>>());
  return out;
}

// An SFT data set of `samples` (mask 0 on the first `prompt` tokens of each) that added `tokens`.
std::string sft_data(const std::string& dir, const rows& samples, std::int64_t seq_len, int prompt,
                     const std::vector<std::string>& tokens, bool ids = true) {
  core::data::manifest m;
  add_tokens(m, tokens, ids);
  core::data::prepare_output_dir(dir);
  core::data::shard_writer_options o;
  o.vocab_size = m.vocab_size;
  o.loss_mask = true;
  core::data::shard_writer w(dir, o);
  for (const auto& s : samples) {
    std::vector<std::uint8_t> mask(s.size(), 1);
    for (int t = 0; t < prompt && t < static_cast<int>(s.size()); ++t) mask[static_cast<std::size_t>(t)] = 0;
    w.append(s.data(), static_cast<std::int64_t>(s.size()), mask.data());
  }
  m.kind = "sft";
  m.layout = "pad";
  m.seq_len = seq_len;
  m.pad_id = 0;
  m.eos_id = 1;
  w.finish(m);
  return dir;
}

// The reference's prompts as a data set that added 8 tokens, ids 128..135, so that the prompts'
// 128, 129, 130 and 133 (a padding row for transformers) are its own ids and the vocabulary is
// transformers' 136: a decoder's rows with the mask of labels_masked (the first 3 tokens out), a
// T5's source and target pairs.
std::string reference_data(const temp_dir& tmp, const std::string& family, const json& ref) {
  const auto dir = tmp.path("data");
  const auto tokens = token_names(8);
  if (!is_t5(family)) return sft_data(dir, rows_of(ref["input_ids"]), 12, 3, tokens);
  core::data::manifest m;
  add_tokens(m, tokens);
  core::data::prepare_output_dir(dir);
  core::data::shard_writer_options o;
  o.vocab_size = m.vocab_size;
  o.target = true;
  core::data::shard_writer w(dir, o);
  const auto sources = rows_of(ref["input_ids"]), targets = rows_of(ref["labels"]);
  for (std::size_t i = 0; i < sources.size(); ++i)
    w.append_pair(sources[i].data(), static_cast<std::int64_t>(sources[i].size()), targets[i].data(),
                  static_cast<std::int64_t>(targets[i].size()));
  m.kind = "seq2seq";
  m.layout = "pad";
  m.seq_len = static_cast<std::int64_t>(sources[0].size());
  m.pad_id = 0;
  m.eos_id = 1;
  core::data::seq2seq_info s;
  s.target_len = static_cast<std::int64_t>(targets[0].size());
  s.over_long = "truncate";
  m.seq2seq = s;
  w.finish(m);
  return dir;
}

// A job fine-tuning `family`'s fixture on `data` with the added tokens of `tokens`, padded to a
// multiple of 8; a global batch of 2 samples, the reference's optimizer settings.
config::job_spec added_job(const std::string& family, const std::string& data, const std::string& tokens, int world,
                           int stage) {
  config::job_spec s;
  s.name = "added";
  s.workload = config::workload_kind::causal_lm;
  s.model.hf_dir = fixture(family);
  s.model.added_tokens = tokens;
  s.model.pad_vocab_to_multiple_of = 8;
  s.data.train = data;
  s.scaling.num_workers = world;
  s.train.seq_len = 12;
  s.train.micro_batch_size = 1;
  s.train.grad_accum = 2 / world;
  s.train.max_steps = 1;
  s.train.lr = 0.01;
  s.train.beta1 = 0.9;
  s.train.beta2 = 0.95;
  s.train.eps = 1e-8;
  s.train.weight_decay = 0.1;
  s.train.grad_clip = 0.5;
  s.train.schedule = config::lr_schedule::constant;
  s.train.warmup_steps = 0;
  s.train.seed = 11;
  s.zero.stage = stage;
  return s;
}

// The first rank's error of a run that must fail.
std::string error_of(const std::vector<test::rank_result<test::rank_run>>& results) {
  REQUIRE(results[0].error);
  return results[0].error_text();
}

std::vector<double> losses(const std::string& run_dir) {
  std::vector<double> out;
  for (const auto& line : test::metrics_lines(run_dir)) out.push_back(line["loss"].get<double>());
  return out;
}

// 16 samples of 12 ids in [3, 128) and the 3 added ids 128..130 (a fixed generator; mask 0 on the
// first 3 tokens), for runs longer than one step.
rows mixed_samples() {
  std::uint64_t state = 99;
  const auto next = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<std::int32_t>(state >> 33);
  };
  rows out(16);
  for (auto& s : out)
    for (int t = 0; t < 12; ++t) s.push_back(next() % 5 == 0 ? 128 + next() % 3 : 3 + next() % 125);
  return out;
}

// added_job over mixed_samples (3 tokens: vocabulary 131, grown to 136 by the padding), global
// batch 4, `steps` steps, a checkpoint every 2.
config::job_spec mixed_job(const temp_dir& tmp, const std::string& family, int world, int stage,
                           std::int64_t steps = 6) {
  const auto tokens = token_names(3);
  std::string data = tmp.path("mixed");
  if (!std::filesystem::exists(data)) sft_data(data, mixed_samples(), 12, 3, tokens);
  auto spec = added_job(family, data, tokens_file(tmp, tokens), world, stage);
  spec.train.grad_accum = 4 / world;
  spec.train.max_steps = steps;
  spec.run.checkpoint.every_steps = 2;
  return spec;
}

// Where cohort starts weight `name` of transformers' resized model `resized`: the same, but a
// vocabulary weight's new rows at the mean of its old rows (transformers draws them around it).
torch::Tensor start_of(const std::string& name, const torch::Tensor& resized) {
  if (!core::model::is_vocab_parameter(name)) return resized;
  auto start = resized.clone();
  const auto mean = resized.slice(0, 0, old_vocab).to(torch::kDouble).mean(0).to(torch::kFloat);
  start.slice(0, old_vocab).copy_(mean.expand_as(start.slice(0, old_vocab)));
  return start;
}

std::string last_checkpoint(const std::string& run_dir) {
  return core::ckpt::list_checkpoints(run_dir).back().path;
}

std::int64_t exported_vocab(const std::string& run_dir) {
  return test::read_json(run_dir + "/model/config.json")["vocab_size"].get<std::int64_t>();
}

}  // namespace

// transformers' new rows are a draw around the old rows' mean (~3e-5 of the rows' spread); cohort
// starts them at the mean. From transformers' own resized rows the step is held to transformers'
// numbers as the golden tests hold a step; from cohort's rows, to what the draw can move: the loss
// within 1e-4, the gradient norm within 2e-3 (T5 v1.1's unscaled head makes the new rows'
// gradients, a large part of its norm, that sensitive), and the weights (transformers' step shifted
// to cohort's start) within 1e-5 but for at most 1% of the elements, near-cancelling gradients that
// the draw moves into Adam's noise band or flips, each within two steps.
TEST_CASE("one SFT step on prompts with added tokens matches transformers' step on the resized model, "
          "at ZeRO 0 and on two ranks at ZeRO 3, for every family, from transformers' resized model and "
          "from cohort's own growth of the fixture",
          "[core][train][added_tokens]") {
  const std::string family = GENERATE(from_range(families));
  const auto [world, stage] = GENERATE(std::pair<int, int>{1, 0}, std::pair<int, int>{2, 3});
  const bool grown = GENERATE(false, true);
  INFO(family << ", " << world << " rank(s) at ZeRO " << stage << (grown ? ", grown by cohort" : ", transformers' rows"));
  temp_dir tmp;
  const std::string resized = fixture(family) + "/resized";
  const json ref = test::read_json(resized + "/reference.json");
  auto spec = added_job(family, reference_data(tmp, family, ref), tokens_file(tmp, token_names(8)), world, stage);
  if (!grown) spec.model.hf_dir = resized;  // 136 ids already: nothing to grow
  if (is_t5(family)) spec.train.seq_len = 10;
  const auto run = tmp.path("run");
  require_ok(test::run_workload(spec, run));

  const json& step = ref["train_step"];
  const auto line = test::metrics_lines(run).back();
  const double loss = ref[step["loss"].get<std::string>()].get<double>();
  CHECK(std::abs(line["loss"].get<double>() - loss) <= (grown ? 1e-4 : 1e-5) * loss);
  const double norm = step["grad_norm_before_clip"].get<double>();
  CHECK(std::abs(line["grad_norm"].get<double>() - norm) <= (grown ? 2e-3 : 1e-5) * norm);
  CHECK(exported_vocab(run) == grown_vocab);
  const auto ours = test::read_weights(run + "/model");
  const auto before = test::read_weights(resized);
  const auto after = test::read_weights(resized + "/after_one_step");
  const core::model::adamw_options o{step["lr"].get<double>(), step["betas"][0].get<double>(),
                                     step["betas"][1].get<double>(), step["eps"].get<double>(),
                                     step["weight_decay"].get<double>()};
  CHECK(ours.size() == after.size());
  std::int64_t loose = 0, count = 0, off = 0;
  for (const auto& [name, want] : after) {
    INFO(name);
    REQUIRE(ours.count(name) == 1);
    REQUIRE(ours.at(name).sizes() == want.sizes());
    count += want.numel();
    if (!grown) {
      loose += test::check_step(before.at(name), ours.at(name), want, o);
      continue;
    }
    // Adam's first step moves an element by about lr whatever its value, and weight decay scales
    // the starting difference by 1 - lr·wd.
    const auto start = start_of(name, before.at(name));
    const auto shifted = want + (start - before.at(name)) * (1 - o.lr * o.weight_decay);
    const auto diff = (ours.at(name).to(torch::kDouble) - shifted.to(torch::kDouble)).abs();
    CHECK(diff.max().item<double>() <= 2 * o.lr + 1e-6);
    off += diff.gt(1e-5).sum().item<std::int64_t>();
  }
  CHECK(loose < count / 20);
  CHECK(off < count / 100);
}

TEST_CASE("a job with added tokens stopped after a checkpoint resumes with its grown vocabulary to the "
          "uninterrupted run's weights bitwise, LoRA too",
          "[core][train][added_tokens][ckpt]") {
  const bool lora = GENERATE(false, true);
  INFO((lora ? "LoRA" : "whole model"));
  temp_dir tmp;
  auto spec = mixed_job(tmp, "mistral", 2, 3);  // untied head
  if (lora) {
    spec.model.lora.enabled = true;
    spec.model.lora.r = 4;
    spec.model.lora.target_modules = {"q_proj", "v_proj"};
  }
  require_ok(test::run_workload(spec, tmp.path("straight")));
  for (const auto& r : test::run_until_step(spec, tmp.path("resumed"), 3)) REQUIRE(r.error);  // step 2 committed
  REQUIRE(core::ckpt::list_checkpoints(tmp.path("resumed")).back().step == 2);
  test::run_options again;
  again.attempt = 1;
  const auto results = test::run_workload(spec, tmp.path("resumed"), again);
  require_ok(results);
  CHECK(test::contains_line(results[0].value->log, "resuming from", "step-00000002"));

  CHECK(losses(tmp.path("resumed")) == losses(tmp.path("straight")));
  const auto straight = test::checkpoint_tensors(last_checkpoint(tmp.path("straight")));
  const auto resumed = test::checkpoint_tensors(last_checkpoint(tmp.path("resumed")));
  REQUIRE(straight.count("param/model.embed_tokens.weight") == 1);  // grown: it trains, LoRA or not
  CHECK(straight.at("param/model.embed_tokens.weight").size() == static_cast<std::size_t>(4 * grown_vocab * 32));
  CHECK(straight.count("param/lm_head.weight") == 1);
  for (const auto& [name, bytes] : straight) {
    INFO(name);
    CHECK(resumed.at(name) == bytes);
  }
  const auto m = core::ckpt::read_manifest(last_checkpoint(tmp.path("resumed")));
  CHECK(m.extra["model_config"]["vocab_size"] == grown_vocab);
  CHECK(m.extra["added_tokens"] == json::parse(R"([{"id": 128, "content": "<T0>"}, {"id": 129, "content": "<T1>"},
                                                   {"id": 130, "content": "<T2>"}])"));
  CHECK(exported_vocab(tmp.path("resumed")) == grown_vocab);
}

TEST_CASE("a job with added tokens of 2 ranks resumes on 1 with the same global batch and continues within "
          "1e-6, and refuses to resume with another vocabulary padding",
          "[core][train][added_tokens][ckpt]") {
  temp_dir tmp;
  const auto two = mixed_job(tmp, "llama-variant", 2, 2);  // tied head
  require_ok(test::run_workload(two, tmp.path("straight")));
  for (const auto& r : test::run_until_step(two, tmp.path("resumed"), 3)) REQUIRE(r.error);
  auto padded = mixed_job(tmp, "llama-variant", 1, 2);
  padded.model.pad_vocab_to_multiple_of = 16;  // 144 rows, not the checkpoint's 136
  const auto refused = error_of(test::run_workload(padded, tmp.path("resumed")));
  CHECK_THAT(refused, Catch::Contains("vocab_size 136") && Catch::Contains("144") &&
                          Catch::Contains("model.pad_vocab_to_multiple_of"));
  const auto one = mixed_job(tmp, "llama-variant", 1, 2);
  require_ok(test::run_workload(one, tmp.path("resumed")));

  CHECK(core::ckpt::read_manifest(last_checkpoint(tmp.path("resumed"))).world_size == 1);
  const auto a = losses(tmp.path("straight")), b = losses(tmp.path("resumed"));
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(std::abs(a[i] - b[i]) <= 1e-6 * a[i]);
  const auto x = test::read_weights(tmp.path("straight") + "/model"), y = test::read_weights(tmp.path("resumed") + "/model");
  REQUIRE(x.at("model.embed_tokens.weight").size(0) == grown_vocab);
  for (const auto& [name, t] : x) {
    INFO(name);
    // A key bias's true gradient is 0 (softmax ignores a shift shared by every key): its Adam
    // steps follow rounding noise, which another world size changes.
    if (name.find("k_proj.bias") != std::string::npos) continue;
    CHECK((t - y.at(name)).norm().item<double>() <= 1e-6 * t.norm().item<double>());
  }
}

TEST_CASE("LoRA with added tokens trains the grown embedding and head whole beside the adapters, as a "
          "whole-model step does, and exports them merged and as peft's modules_to_save",
          "[core][train][added_tokens][lora]") {
  const std::string family = GENERATE(as<std::string>{}, "llama-variant", "mistral");  // tied, untied
  const bool tied = family == "llama-variant";
  INFO(family);
  temp_dir tmp;
  auto whole = mixed_job(tmp, family, 2, 3, 1);
  whole.train.grad_clip = 0;  // Adam's first step is then per element: LoRA's rows move as the whole model's
  auto lora = whole;
  lora.model.lora.enabled = true;
  lora.model.lora.r = 4;
  lora.model.lora.target_modules = {"q_proj", "v_proj"};
  require_ok(test::run_workload(whole, tmp.path("whole")));
  require_ok(test::run_workload(lora, tmp.path("lora")));
  // B starts at zero: the first step's loss, and with it the embedding's and head's gradients,
  // are the whole model's.
  CHECK(std::abs(losses(tmp.path("lora"))[0] - losses(tmp.path("whole"))[0]) <= 1e-6);

  // The checkpoint: the adapters (2 maps x 2 layers) and the grown weights, each with its moments.
  const auto tensors = test::checkpoint_tensors(last_checkpoint(tmp.path("lora")));
  CHECK(tensors.size() == 3 * (2 * 2 * 2 + (tied ? 1 : 2)));
  CHECK(tensors.count("param/model.embed_tokens.weight") == 1);

  // The merged export: the grown embedding (and head) as they trained, the base elsewhere.
  auto config = core::model::read_config(fixture(family));
  config.vocab_size = grown_vocab;
  core::model::decoder meta(config, torch::TensorOptions().device(torch::kMeta), /*initialize=*/false);
  const auto initial = core::model::open_resized_hf_weights(fixture(family), meta->hf_parameters(), old_vocab);
  const auto merged = test::read_weights(tmp.path("lora") + "/model");
  const auto reference = test::read_weights(tmp.path("whole") + "/model");
  const auto base = test::read_weights(fixture(family));
  CHECK(exported_vocab(tmp.path("lora")) == grown_vocab);
  CHECK(merged.size() == base.size());
  core::model::adamw_options o;
  o.lr = lora.train.lr;
  o.weight_decay = lora.train.weight_decay;
  for (const auto& [name, t] : merged) {
    INFO(name);
    if (core::model::is_vocab_parameter(name)) {
      auto before = torch::empty({t.numel()}, torch::kFloat);
      initial->read(name, 0, before);
      CHECK(test::max_abs_diff(t.slice(0, old_vocab), before.view(t.sizes()).slice(0, old_vocab)) > 1e-3);  // new rows moved
      test::check_step(before.view(t.sizes()), t, reference.at(name), o);
    } else if (name.find("q_proj") == std::string::npos && name.find("v_proj") == std::string::npos) {
      CHECK(torch::equal(t, base.at(name)));  // frozen and not adapted
    }
  }
  // The adapter export: peft's modules_to_save beside the adapters (a tied head also as lm_head).
  const auto adapter_config = test::read_json(tmp.path("lora") + "/adapter/adapter_config.json");
  CHECK(adapter_config["modules_to_save"] == json::parse(R"(["embed_tokens", "lm_head"])"));
  const auto adapter = test::read_weights(tmp.path("lora") + "/adapter");
  CHECK(adapter.size() == 2 * 2 * 2 + 2);
  CHECK(torch::equal(adapter.at("base_model.model.model.embed_tokens.weight"), merged.at("model.embed_tokens.weight")));
  const auto& head = adapter.at("base_model.model.lm_head.weight");
  CHECK(torch::equal(head, merged.at(tied ? "model.embed_tokens.weight" : "lm_head.weight")));
}

TEST_CASE("the export of a job with added tokens carries the grown model and the tokenizer files with the "
          "added tokens at the data set's ids, as cohort's tokenizer reads them back",
          "[core][train][added_tokens][tools]") {
  temp_dir tmp;
  // A small Llama over the llama-style tokenizer's 959 ids, with transformers' tokenizer files.
  const std::string model = tmp.path("model");
  torch::manual_seed(5);
  auto config = test::family_configs()[1];  // tied head
  config["vocab_size"] = 959;
  core::model::decoder net(core::model::parse_config(config, "test"));
  core::model::save_hf_model(*net, model);
  std::filesystem::copy_file(std::string(COHORT_TOKENIZER_DATA) + "/llama-style/tokenizer.json",
                             model + "/tokenizer.json");
  tmp.write("model/tokenizer_config.json", R"({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
    "added_tokens_decoder": {"0": {"content": "<unk>", "lstrip": false, "normalized": false, "rstrip": false,
    "single_word": false, "special": true}}, "tokenizer_class": "LlamaTokenizer"})");
  tmp.write("model/special_tokens_map.json", R"({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"})");
  std::string records;
  for (int i = 0; i < 8; ++i)
    records += json{{"q", "what is " + std::to_string(i)}, {"a", "it is " + std::to_string(i)}}.dump() + "\n";
  const auto tokens = tokens_file(tmp, {"<USER>", "<BOT>"});
  const auto built = test::run_tool(
      "cohort-data", "build --input " + tmp.write("sft.jsonl", records) + " --tokenizer " + model +
                         "/tokenizer.json --template '<USER>{q}<BOT>{a}' --special-tokens " + tokens +
                         " --seq-len 32 --out " + tmp.path("data"));
  INFO(built.err);
  REQUIRE(built.code == 0);
  const auto manifest = core::data::read_manifest(tmp.path("data"));
  REQUIRE(manifest.special_token_ids == std::vector<std::int64_t>{959, 960});
  REQUIRE(manifest.vocab_size == 961);

  auto spec = added_job("llama-variant", tmp.path("data"), tokens, 2, 3);
  spec.model.hf_dir = model;
  spec.train.seq_len = 32;
  spec.train.max_steps = 2;
  require_ok(test::run_workload(spec, tmp.path("run")));

  const std::string out = tmp.path("run") + "/model";
  CHECK(exported_vocab(tmp.path("run")) == 968);  // 961 rounded up to a multiple of 8
  CHECK(test::read_weights(out).at("model.embed_tokens.weight").sizes() == torch::IntArrayRef({968, 16}));
  const auto tokenizer = test::read_json(out + "/tokenizer.json");
  const auto& added = tokenizer["added_tokens"];
  REQUIRE(added.size() == 5);  // <unk>, <s>, </s>, then the data set's, by id
  CHECK(added[3]["id"] == 959);
  CHECK(added[3]["content"] == "<USER>");
  CHECK(added[4]["id"] == 960);
  CHECK(added[4]["special"] == true);
  const auto tokenizer_config = test::read_json(out + "/tokenizer_config.json");
  CHECK(tokenizer_config["added_tokens_decoder"]["960"]["content"] == "<BOT>");
  CHECK(tokenizer_config["added_tokens_decoder"]["0"]["content"] == "<unk>");
  CHECK(tokenizer_config["additional_special_tokens"] == json::parse(R"(["<USER>", "<BOT>"])"));
  CHECK(test::read_json(out + "/special_tokens_map.json")["additional_special_tokens"] ==
        json::parse(R"(["<USER>", "<BOT>"])"));
  // cohort's tokenizer (run as `cohort-model tokenize`) reads the export's added tokens whole, at
  // the ids the data set trained; the model's own tokenizer splits them.
  const auto ids = [](const std::string& dir, const std::string& text) {
    const auto r = test::run_tool("cohort-model", "tokenize --tokenizer " + dir + " --text '" + text + "'");
    INFO(r.err);
    REQUIRE(r.code == 0);
    return json::parse(r.out).get<std::vector<std::int64_t>>();
  };
  const auto text = ids(out, "<USER>what is 3<BOT>it is 3");
  REQUIRE(text.size() > 2);
  CHECK(text.front() == 959);
  CHECK(std::count(text.begin(), text.end(), 960) == 1);
  CHECK(ids(model, "<USER>").size() > 1);
  const auto decoded = test::run_tool("cohort-model", "tokenize --tokenizer " + out + " --decode '[959, 960]'");
  REQUIRE(decoded.code == 0);
  CHECK(json::parse(decoded.out) == "<USER><BOT>");
}

TEST_CASE("added tokens a job cannot use are refused naming the field, the file and the fix",
          "[core][train][added_tokens]") {
  temp_dir tmp;
  const auto tokens = token_names(3);
  const auto data = sft_data(tmp.path("data"), mixed_samples(), 12, 3, tokens);
  auto spec = added_job("mistral", data, tokens_file(tmp, tokens), 1, 0);
  const auto run = [&](const config::job_spec& s) { return error_of(test::run_workload(s, tmp.path("run"))); };

  SECTION("a data set beyond the model's vocabulary without model.added_tokens") {
    spec.model.added_tokens.clear();
    CHECK_THAT(run(spec), Catch::Contains("data.train") && Catch::Contains("131 ids") &&
                              Catch::Contains("vocab_size 128") && Catch::Contains("model.added_tokens") &&
                              Catch::Contains("<T0>"));
  }
  SECTION("a tokens file that lists other tokens than the data set was built with") {
    spec.model.added_tokens = tokens_file(tmp, {"<T0>", "<T2>", "<T1>"}, "other.json");
    const auto e = run(spec);
    CHECK_THAT(e, Catch::Contains("model.added_tokens") && Catch::Contains("other.json") &&
                      Catch::Contains("cohort-data build --special-tokens"));
    // submit and the head refuse it too, where they see both files.
    CHECK_THROWS_WITH(core::train::check_data_set(spec),
                      Catch::StartsWith("model.added_tokens: ") && Catch::Contains("other.json"));
  }
  SECTION("a tokens file that is not there or not a tokens file") {
    spec.model.added_tokens = tmp.path("missing.json");
    CHECK_THAT(run(spec), Catch::Contains("model.added_tokens: " + tmp.path("missing.json") + ": cannot open"));
    spec.model.added_tokens = tmp.write("list.json", R"(["<T0>"])");
    CHECK_THAT(run(spec), Catch::Contains("model.added_tokens") && Catch::Contains("{\"tokens\""));
  }
  SECTION("a data set whose manifest records the tokens but not their ids") {
    spec.data.train = sft_data(tmp.path("old"), mixed_samples(), 12, 3, tokens, /*ids=*/false);
    CHECK_THAT(run(spec), Catch::Contains("model.added_tokens") && Catch::Contains("not their ids") &&
                              Catch::Contains("rebuild"));
  }
}
