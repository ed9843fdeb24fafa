// T5 against transformers' references: logits, loss, encoder output and one clipped AdamW step
// on tiny v1.0 and v1.1 models; save -> load round trips; the untied head; config refusals.
#include <filesystem>

#include <torch/utils.h>

#include "core/model/adamw.hpp"
#include "core/model/hf_io.hpp"
#include "core/model/model_error.hpp"
#include "core/model/safetensors.hpp"
#include "core/model/t5.hpp"
#include "tests/core/model/model_test_support.hpp"
#include "tests/support/temp_dir.hpp"

#include "tests/support/catch_torch.hpp"

#include "tests/core/model/golden_support.hpp"

using namespace cohort::core::model;
using cohort::test::check_one_step;
using cohort::test::check_same_weights;
using cohort::test::check_saved_copy;
using cohort::test::max_abs_diff;
using cohort::test::read_json;
using cohort::test::read_weights;
using cohort::test::temp_dir;
using cohort::test::to_tensor;
using nlohmann::json;

namespace {

std::vector<std::string> t5_dirs() {
  return {cohort::test::local_fixture("t5-v1_0"), cohort::test::local_fixture("t5-v1_1")};
}

struct reference_batch {
  torch::Tensor ids, mask, labels;
};

reference_batch batch_of(const json& ref) {
  return {to_tensor(ref["input_ids"], torch::kInt64), to_tensor(ref["attention_mask"], torch::kInt64),
          to_tensor(ref["labels"], torch::kInt64)};
}

// The fixture's logits, loss, encoder output, decoder input and unmasked loss against ours.
void check_against_reference(const std::string& dir) {
  INFO(dir);
  const json ref = read_json(dir + "/reference.json");
  auto model = load_t5_model(dir, {torch::kFloat});
  const auto b = batch_of(ref);
  torch::NoGradGuard no_grad;
  CHECK(torch::equal(model->shift_right(b.labels), to_tensor(ref["decoder_input_ids"], torch::kInt64)));
  const auto out = model->forward(b.ids, b.mask, b.labels);
  CHECK(max_abs_diff(out.encoder_hidden, to_tensor(ref["encoder_last_hidden_state"], torch::kFloat)) < 1e-4);
  CHECK(max_abs_diff(out.logits, to_tensor(ref["logits"], torch::kFloat)) < 1e-4);
  const double loss = ref["loss"].get<double>();
  CHECK(std::abs(out.loss.item<double>() - loss) <= 1e-5 * std::abs(loss));
  const double unmasked = ref["loss_without_attention_mask"].get<double>();
  const auto no_mask = model->forward(b.ids, torch::Tensor(), b.labels);
  CHECK(std::abs(no_mask.loss.item<double>() - unmasked) <= 1e-5 * std::abs(unmasked));
  CHECK(std::abs(no_mask.loss.item<double>() - loss) > 1e-3);  // the mask matters on this batch
}

}  // namespace

TEST_CASE("a T5 v1.0 checkpoint (relu, tied head scaled by d_model^-0.5) gives transformers' "
          "logits, loss and encoder output",
          "[core][model][t5]") {
  const auto dir = cohort::test::local_fixture("t5-v1_0");
  const auto cfg = read_t5_config(dir);
  CHECK(cfg.activation == "relu");
  CHECK_FALSE(cfg.gated);
  CHECK(cfg.scale_decoder_outputs);
  check_against_reference(dir);
}

// transformers 5.17 wrote this one with tie_word_embeddings true (it forces the field) and
// scale_decoder_outputs false: the head is shared.weight, unscaled.
TEST_CASE("a T5 v1.1 checkpoint (gated-gelu, 3 decoder over 2 encoder layers, bf16 on disk) gives "
          "transformers' logits, loss and encoder output",
          "[core][model][t5]") {
  const auto dir = cohort::test::local_fixture("t5-v1_1");
  const auto cfg = read_t5_config(dir);
  CHECK(cfg.activation == "gelu_new");
  CHECK(cfg.gated);
  CHECK_FALSE(cfg.scale_decoder_outputs);
  CHECK(cfg.num_decoder_layers == 3);
  check_against_reference(dir);
}

TEST_CASE("one clipped AdamW step on a T5 matches torch.optim.AdamW", "[core][model][t5]") {
  for (const auto& dir : t5_dirs()) {
    INFO(dir);
    const json ref = read_json(dir + "/reference.json");
    REQUIRE(ref["train_step"]["uses_attention_mask"] == true);
    auto model = load_t5_model(dir, {torch::kFloat});
    const auto b = batch_of(ref);
    for (const auto& p : model->hf_parameters()) p.tensor.set_requires_grad(true);
    model->forward(b.ids, b.mask, b.labels).loss.backward();
    check_one_step(dir, model->hf_parameters());
  }
}

TEST_CASE("a T5 saved and loaded again is bit for bit the same, in one file or in shards",
          "[core][model][t5]") {
  for (const auto& dir : t5_dirs()) {
    INFO(dir);
    auto model = load_t5_model(dir);  // in the stored dtype
    temp_dir out;
    save_options so;
    so.copy_files_from = dir;
    save_t5_model(*model, out.str(), so);
    CHECK(std::filesystem::exists(out.path("generation_config.json")));
    check_saved_copy(dir, out.str(), model->hf_parameters().size());
    so.max_shard_bytes = 40'000;
    save_t5_model(*model, out.str(), so);
    CHECK(std::filesystem::exists(out.path("model.safetensors.index.json")));
    CHECK_FALSE(std::filesystem::exists(out.path("model.safetensors")));
    check_same_weights(load_t5_model(out.str())->hf_parameters(), model->hf_parameters());
  }
}

TEST_CASE("an untied T5 head is lm_head.weight, saved and loaded under that name", "[core][model][t5]") {
  const auto dir = cohort::test::local_fixture("t5-v1_1");
  auto tied = load_t5_model(dir, {torch::kFloat});
  t5_config cfg = tied->config();
  cfg.tie_word_embeddings = false;
  t5_model untied(cfg);
  untied->eval();
  REQUIRE(untied->hf_parameters().size() == tied->hf_parameters().size() + 1);
  CHECK(untied->hf_parameters().back().name == "lm_head.weight");
  torch::NoGradGuard no_grad;
  for (const auto& p : untied->hf_parameters()) {
    const std::string from = p.name == "lm_head.weight" ? "shared.weight" : p.name;
    for (const auto& q : tied->hf_parameters()) {
      if (q.name == from) p.tensor.copy_(q.tensor);
    }
  }
  const json ref = read_json(dir + "/reference.json");
  const auto b = batch_of(ref);
  const auto want = tied->forward(b.ids, b.mask, b.labels);
  CHECK(torch::equal(untied->forward(b.ids, b.mask, b.labels).logits, want.logits));

  // The head's own weight drives the logits; the embedding stays as it was.
  untied->hf_parameters().back().tensor.mul_(2.0);
  const auto doubled = untied->forward(b.ids, b.mask, b.labels);
  CHECK(max_abs_diff(doubled.logits, want.logits * 2.0) < 1e-4);
  CHECK(torch::equal(doubled.encoder_hidden, want.encoder_hidden));

  temp_dir out;
  save_t5_model(*untied, out.str());
  const json written = read_json(out.path("config.json"));
  CHECK(written["tie_word_embeddings"] == false);
  CHECK(written["scale_decoder_outputs"] == false);
  CHECK(read_weights(out.str()).count("lm_head.weight") == 1);
  auto again = load_t5_model(out.str());
  CHECK_FALSE(again->config().tie_word_embeddings);
  CHECK(torch::equal(again->forward(b.ids, b.mask, b.labels).logits, doubled.logits));
}

TEST_CASE("T5 relative position buckets follow transformers' bidirectional and causal rules",
          "[core][model][t5]") {
  // 8 buckets, max distance 20. Bidirectional: 4 per direction, positions 0-1 exact, 2-19 log
  // spaced over buckets 2-3; keys after the query add 4. Causal: keys after the query go to 0,
  // earlier ones 0-3 exact, 4-19 log spaced over 4-7.
  const auto rel = torch::tensor({-30, -19, -5, -2, -1, 0, 1, 2, 5, 19, 30}, torch::kInt64);
  const auto bi = t5_relative_position_bucket(rel, true, 8, 20);
  const auto causal = t5_relative_position_bucket(rel, false, 8, 20);
  const std::vector<std::int64_t> want_bi{3, 3, 2, 2, 1, 0, 5, 6, 6, 7, 7};
  const std::vector<std::int64_t> want_causal{7, 7, 4, 2, 1, 0, 0, 0, 0, 0, 0};
  CHECK(std::vector<std::int64_t>(bi.data_ptr<std::int64_t>(), bi.data_ptr<std::int64_t>() + 11) == want_bi);
  CHECK(std::vector<std::int64_t>(causal.data_ptr<std::int64_t>(), causal.data_ptr<std::int64_t>() + 11) ==
        want_causal);
}

TEST_CASE("a T5 config.json with values cohort cannot run is refused naming the field and what is allowed",
          "[core][model][t5]") {
  const json base = read_json(cohort::test::local_fixture("t5-v1_0") + "/config.json");
  const auto refusal = [](const json& j) -> std::string {
    try {
      parse_t5_config(j, "t5/config.json");
    } catch (const model_error& e) {
      CHECK(e.code() == model_errc::bad_config);
      return e.what();
    }
    FAIL("accepted");
    return "";
  };
  json j = base;
  j["feed_forward_proj"] = "gated-tanh";
  CHECK_THAT(refusal(j), Catch::Contains("feed_forward_proj") && Catch::Contains("gated-gelu"));
  j = base;
  j["relative_attention_num_buckets"] = 2;
  CHECK_THAT(refusal(j), Catch::Contains("relative_attention_num_buckets") && Catch::Contains(">= 4"));
  j = base;
  j["relative_attention_max_distance"] = 3;
  CHECK_THAT(refusal(j), Catch::Contains("relative_attention_max_distance"));
  j = base;
  j["decoder_start_token_id"] = 128;
  CHECK_THAT(refusal(j), Catch::Contains("decoder_start_token_id") && Catch::Contains("[0, 128)"));
  j = base;
  j["d_model"] = "32";
  CHECK_THAT(refusal(j), Catch::Contains("d_model") && Catch::Contains("integer"));
  j = base;
  j["is_decoder"] = true;
  CHECK_THAT(refusal(j), Catch::Contains("is_decoder"));
  // The decoder families' reader points T5 elsewhere instead of calling it unknown.
  CHECK_THROWS_WITH(parse_config(base, "t5/config.json"), Catch::Contains("encoder-decoder"));

  // Defaults as T5Config's: decoder layers as many as the encoder's, scaling as the tie says.
  j = base;
  j.erase("num_decoder_layers");
  j.erase("scale_decoder_outputs");
  j["tie_word_embeddings"] = false;
  const auto cfg = parse_t5_config(j, "t5/config.json");
  CHECK(cfg.num_decoder_layers == cfg.num_layers);
  CHECK_FALSE(cfg.scale_decoder_outputs);
  CHECK_FALSE(cfg.tie_word_embeddings);
}

TEST_CASE("a T5 forward refuses ids outside the vocabulary and mismatched shapes, naming them",
          "[core][model][t5]") {
  auto model = load_t5_model(cohort::test::local_fixture("t5-v1_0"), {torch::kFloat});
  const auto ids = torch::tensor({{5, 6, 1}}, torch::kInt64);
  const auto labels = torch::tensor({{7, 1}}, torch::kInt64);
  torch::NoGradGuard no_grad;
  CHECK_THROWS_WITH(model->forward(ids, {}, torch::tensor({{7, 500}}, torch::kInt64)),
                    Catch::Contains("labels[0][1] = 500"));
  CHECK_THROWS_WITH(model->forward(torch::tensor({{5, 128}}, torch::kInt64), {}, labels),
                    Catch::Contains("input_ids[0][1] = 128"));
  CHECK_THROWS_WITH(model->forward(ids, torch::ones({1, 2}, torch::kInt64), labels),
                    Catch::Contains("attention_mask"));
  CHECK_THROWS_WITH(model->forward(ids, {}, {}), Catch::Contains("labels or decoder_input_ids"));
  const auto out = model->forward(ids, {}, torch::tensor({{7, -100}}, torch::kInt64));
  CHECK(std::isfinite(out.loss.item<double>()));
}

TEST_CASE("a T5 in bf16 computes transformers' loss within bf16 rounding", "[core][model][t5]") {
  const auto dir = cohort::test::local_fixture("t5-v1_1");  // stored in bf16: no rounding on load
  const json ref = read_json(dir + "/reference.json");
  auto model = load_t5_model(dir);
  REQUIRE(model->hf_parameters().front().tensor.scalar_type() == torch::kBFloat16);
  const auto b = batch_of(ref);
  torch::NoGradGuard no_grad;
  const auto out = model->forward(b.ids, b.mask, b.labels);
  CHECK(out.logits.scalar_type() == torch::kBFloat16);
  CHECK(out.loss.scalar_type() == torch::kFloat);
  const double loss = ref["loss"].get<double>();
  CHECK(std::abs(out.loss.item<double>() - loss) <= 2e-2 * std::abs(loss));
}

TEST_CASE("a T5 checkpoint may hold the stacks' copies of shared.weight; other extra tensors are refused",
          "[core][model][t5]") {
  const auto dir = cohort::test::local_fixture("t5-v1_0");
  auto model = load_t5_model(dir, {torch::kFloat});
  std::vector<tensor_blob> blobs;
  for (const auto& p : model->hf_parameters()) {
    blobs.push_back({p.name, "F32", p.tensor.sizes().vec(), p.tensor.data_ptr(),
                     static_cast<std::size_t>(p.tensor.numel() * 4)});
  }
  const auto& shared = model->hf_parameters().front();
  REQUIRE(shared.name == "shared.weight");
  for (const char* copy : {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight"}) {
    blobs.push_back({copy, "F32", shared.tensor.sizes().vec(), shared.tensor.data_ptr(),
                     static_cast<std::size_t>(shared.tensor.numel() * 4)});
  }
  temp_dir out;
  std::filesystem::copy_file(dir + "/config.json", out.path("config.json"));
  write_safetensors(out.path("model.safetensors"), blobs);
  check_same_weights(load_t5_model(out.str(), {torch::kFloat})->hf_parameters(), model->hf_parameters());

  blobs.push_back({"encoder.block.2.layer.0.SelfAttention.q.weight", "F32", {1}, shared.tensor.data_ptr(), 4});
  write_safetensors(out.path("model.safetensors"), blobs);
  CHECK_THROWS_WITH(load_t5_model(out.str()),
                    Catch::Contains("unexpected tensor 'encoder.block.2.layer.0.SelfAttention.q.weight'") &&
                        Catch::Contains("a t5 model"));
}
