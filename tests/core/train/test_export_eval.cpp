// A job's exported model is the model it trained: `cohort-model eval` on the export of the
// checkpoint after step k gives the loss the run logged for step k + 1 (same weights, same batch),
// and the job's final model lands in <run>/model; for LoRA, the merged export is the adapted model.
#include <torch/torch.h>

#include "tests/core/train/engine_fixture.hpp"
#include "tests/core/train/workload_runs.hpp"

#include "tests/support/catch_torch.hpp"

#include <sys/stat.h>

#include <fstream>

#include "core/ckpt/hf_export.hpp"
#include "core/ckpt/layout.hpp"
#include "core/data/batch_loader.hpp"
#include "core/model/hf_io.hpp"
#include "core/model/lora_config.hpp"
#include "core/model/safetensors.hpp"
#include "tests/support/tool_run.hpp"

using namespace cohort;
using cohort::test::temp_dir;

namespace {

constexpr std::int64_t seq_len = 16;

// Pretraining-style data: every sample is seq_len real tokens, every token a label, so a plain
// evaluation (labels = input ids) sees exactly what training saw.
std::string make_packed_dataset(const std::string& dir) {
  core::data::prepare_output_dir(dir);
  core::data::shard_writer_options o;
  o.vocab_size = 300;
  core::data::shard_writer w(dir, o);
  std::uint64_t state = 99;
  for (int i = 0; i < 64; ++i) {
    std::vector<std::int32_t> ids;
    for (std::int64_t t = 0; t < seq_len; ++t) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      ids.push_back(static_cast<std::int32_t>(t > 0 && (state >> 60) != 0 ? 3 + (ids.back() - 2) % 256
                                                                        : 3 + (state >> 33) % 256));
    }
    w.append(ids.data(), seq_len, nullptr);
  }
  core::data::manifest m;
  m.kind = "pretrain";
  m.layout = "pack";
  m.seq_len = seq_len;
  m.eos_id = 2;
  m.vocab_size = 300;
  w.finish(m);
  return dir;
}

// The global batch of step `step` (0-based) as {"input_ids": [[...], ...]}: every rank's
// micro-batches, in rank order.
std::string global_batch_ids(const config::job_spec& spec, std::int64_t step) {
  auto data = std::make_shared<const core::data::dataset>(spec.data.train);
  nlohmann::json rows = nlohmann::json::array();
  for (int rank = 0; rank < spec.scaling.num_workers; ++rank) {
    core::data::loader_options o;
    o.geometry = {spec.scaling.num_workers, spec.train.micro_batch_size, spec.train.grad_accum};
    o.rank = rank;
    o.seed = spec.train.seed;
    core::data::batch_loader loader(data, o);
    loader.seek(step);
    core::data::micro_batch mb;
    for (int m = 0; m < spec.train.grad_accum; ++m) {
      loader.next(mb);
      for (std::int64_t b = 0; b < mb.batch_size; ++b)
        rows.push_back(std::vector<std::int64_t>(mb.tokens.begin() + b * mb.seq_len,
                                                 mb.tokens.begin() + (b + 1) * mb.seq_len));
    }
  }
  return nlohmann::json{{"input_ids", rows}}.dump();
}

double eval_loss(const std::string& hf_dir, const std::string& ids_file) {
  const auto r = test::run_tool("cohort-model", "eval --hf-dir " + hf_dir + " --input-ids " + ids_file);
  INFO(r.err);
  REQUIRE(r.code == 0);
  return nlohmann::json::parse(r.out)["loss"].get<double>();
}

}  // namespace

TEST_CASE("cohort-model eval on an exported checkpoint gives the loss the run logged for its next step",
          "[core][train][ckpt][tools]") {
  temp_dir tmp;
  auto spec = test::tiny_job(make_packed_dataset(tmp.path("data")), 2, 3, false);
  spec.train.max_steps = 6;
  spec.run.checkpoint.every_steps = 3;
  const auto results = test::run_workload(spec, tmp.path("run"));
  for (const auto& r : results) REQUIRE(r.error_text() == "");
  const auto logged = test::metrics_lines(tmp.path("run"));
  REQUIRE(logged.size() == 6);

  core::ckpt::export_hf(core::ckpt::step_dir(tmp.path("run"), 3), tmp.path("step-3-model"));
  std::ofstream(tmp.path("batch-4.json")) << global_batch_ids(spec, 3);
  const double loss = eval_loss(tmp.path("step-3-model"), tmp.path("batch-4.json"));
  const double step4 = logged[3]["loss"].get<double>();
  CHECK(std::abs(loss - step4) <= 1e-5 * std::abs(step4));

  // The final model, exported by the job itself, is the weights after step 6.
  struct stat st {};
  REQUIRE(::stat((tmp.path("run") + "/model/model.safetensors").c_str(), &st) == 0);
  REQUIRE(::stat((tmp.path("run") + "/model/config.json").c_str(), &st) == 0);
  const double final_loss = eval_loss(tmp.path("run") + "/model", tmp.path("batch-4.json"));
  CHECK(final_loss < loss);  // trained on two more steps
  CHECK(test::contains_line(results[0].value->log, "exported to", "/model"));
}

namespace {

// A LoRA fine-tune of the tiny-llama fixture on the packed data, r 4 on every linear map.
config::job_spec lora_packed_job(const std::string& data) {
  auto spec = test::with_lora(test::tiny_job(data, 2, 3, false),
                              {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}, 4, 16);
  spec.train.max_steps = 6;
  spec.run.checkpoint.every_steps = 3;
  return spec;
}

}  // namespace

TEST_CASE("cohort-model eval on a LoRA checkpoint's merged export gives the loss the run logged for its next step",
          "[core][train][ckpt][tools][lora]") {
  temp_dir tmp;
  const auto spec = lora_packed_job(make_packed_dataset(tmp.path("data")));
  for (const auto& r : test::run_workload(spec, tmp.path("run"))) REQUIRE(r.error_text() == "");
  const auto logged = test::metrics_lines(tmp.path("run"));
  REQUIRE(logged.size() == 6);

  const auto stats = core::ckpt::export_hf(core::ckpt::step_dir(tmp.path("run"), 3), tmp.path("merged"));
  CHECK(stats.tensors == 21);  // every base tensor, adapted or not
  std::ofstream(tmp.path("batch-4.json")) << global_batch_ids(spec, 3);
  const double loss = eval_loss(tmp.path("merged"), tmp.path("batch-4.json"));
  const double step4 = logged[3]["loss"].get<double>();
  CHECK(std::abs(loss - step4) <= 1e-5 * std::abs(step4));
  // The adapters did change the model: the base gives another loss.
  CHECK(std::abs(eval_loss(spec.model.hf_dir, tmp.path("batch-4.json")) - step4) > 1e-3);
}

TEST_CASE("the merged export of LoRA adapters computes the adapted model's logits, and bf16 rounds it",
          "[core][train][ckpt][lora]") {
  temp_dir tmp;
  const auto spec = lora_packed_job(make_packed_dataset(tmp.path("data")));
  for (const auto& r : test::run_workload(spec, tmp.path("run"))) REQUIRE(r.error_text() == "");
  const auto ckpt = core::ckpt::step_dir(tmp.path("run"), 6);

  // The adapted model: the base, adapters added and filled from the peft export by peft's names.
  auto adapted = core::model::load_hf_model(spec.model.hf_dir, {torch::kFloat});
  core::model::lora_config lora;
  lora.r = 4;
  lora.alpha = 16;
  lora.target_modules = spec.model.lora.target_modules;
  adapted->add_lora(lora, torch::kFloat);
  adapted->eval();
  core::model::safetensors_reader peft(tmp.path("run") + "/adapter/adapter_model.safetensors");
  REQUIRE(peft.tensors().size() == adapted->lora_parameters().size());
  for (const auto& p : adapted->lora_parameters()) {
    INFO(p.name);
    const auto& entry = peft.at(std::string(core::model::peft_tensor_prefix) + p.name);
    REQUIRE(entry.shape == p.tensor.sizes().vec());
    peft.read(entry, p.tensor.data_ptr());
  }
  const auto ids = torch::randint(3, 259, {2, seq_len}, torch::kInt64);
  torch::NoGradGuard no_grad;
  const auto expected = adapted->forward(ids).logits;

  auto merged = core::model::load_hf_model(tmp.path("run") + "/model", {torch::kFloat});
  const auto got = merged->forward(ids).logits;
  CAPTURE((got - expected).abs().max().item<double>());
  CHECK(torch::allclose(got, expected, 1e-5, 1e-5));

  core::ckpt::hf_export_options bf16;
  bf16.dtype = "bf16";
  core::ckpt::export_hf(ckpt, tmp.path("merged-bf16"), bf16);
  const auto rounded = core::model::load_hf_model(tmp.path("merged-bf16"), {torch::kFloat})->forward(ids).logits;
  CHECK((rounded - expected).abs().max().item<double>() < 0.05);
}
