// LoRA fine-tuning in the engine: only the adapters train, every ZeRO stage trains them alike,
// the first step is the base model's, and a run's checkpoints and exports hold the adapters only
// (peft's names and adapter_config.json in <run>/adapter).
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/ckpt/hf_export.hpp"
#include "core/ckpt/layout.hpp"
#include "core/model/safetensors.hpp"
#include "tests/core/train/engine_fixture.hpp"
#include "tests/core/train/workload_runs.hpp"
#include "tests/support/files.hpp"

#include "tests/support/catch_torch.hpp"

using namespace cohort;
using cohort::test::temp_dir;

namespace {

const std::vector<std::string> all_targets = {"q_proj", "k_proj", "v_proj", "o_proj",
                                              "gate_proj", "up_proj", "down_proj"};

// tiny_job on the tiny-llama fixture (hidden 64, 2 layers, vocab 512) with LoRA r 4 on every
// linear map: per layer 4 · (128 + 96 + 96 + 128 + 3 · 224) = 4480 adapter weights.
config::job_spec lora_job(const std::string& data, int world, int stage, std::int64_t steps = 8) {
  auto spec = test::with_lora(test::tiny_job(data, world, stage, false), all_targets);
  spec.train.max_steps = steps;
  return spec;
}

constexpr std::size_t adapter_weights = 2 * 4480;

using cohort::test::relative;

double max_difference(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double{a[i]} - b[i]));
  return worst;
}

}  // namespace

TEST_CASE(
    "LoRA adapters trained under ZeRO 0, 1, 2 and 3 and on the fused path agree, and the first step is the "
    "base's",
    "[core][train][lora]") {
  temp_dir tmp;
  const auto data = test::make_tiny_dataset(tmp.path("data"));
  const auto base = test::run_job(lora_job(data, 2, 0));
  const auto& steps = base[0].steps;
  REQUIRE(steps.size() == 8);
  REQUIRE(base[0].weights.size() == adapter_weights);  // full_weights: the adapters only
  CHECK(steps.back().loss < steps.front().loss);
  // B starts at zero: step 1's loss is the base model's, as a whole-model fine-tune computes it.
  auto whole = lora_job(data, 2, 0, 1);
  whole.model.lora = {};
  CHECK(relative(test::run_job(whole)[0].steps[0].loss, steps[0].loss) <= 1e-12);

  for (int stage = 1; stage <= 3; ++stage) {
    for (bool checkpointing : {false, true}) {
      if (checkpointing && stage == 1) continue;
      INFO("stage " << stage << (checkpointing ? " with activation checkpointing" : ""));
      auto spec = lora_job(data, 2, stage);
      spec.train.activation_checkpointing = checkpointing;
      const auto out = test::run_job(spec);
      for (std::size_t k = 0; k < steps.size(); ++k) CHECK(relative(out[0].steps[k].loss, steps[k].loss) <= 1e-5);
      CHECK(max_difference(out[0].weights, base[0].weights) <= 1e-5);
    }
  }
  // The fused path (the frozen base loaded with room for q/k/v's and gate/up's adapters, which
  // share their base GEMM) trains alike, also with ZeRO-3's gathered adapters and recomputation.
  for (int stage : {0, 3}) {
    INFO("the fused path, stage " << stage);
    auto fused = lora_job(data, 2, stage);
    fused.train.path = config::compute_path::fused;
    fused.train.activation_checkpointing = stage == 3;
    const auto out = test::run_job(fused);
    for (std::size_t k = 0; k < steps.size(); ++k)
      CHECK(relative(out[0].steps[k].loss, steps[k].loss) <= 1e-5);
    CHECK(max_difference(out[0].weights, base[0].weights) <= 1e-5);
  }
}

TEST_CASE("LoRA with dropout trains alike under ZeRO-3 with and without layer recomputation",
          "[core][train][lora]") {
  temp_dir tmp;
  const auto data = test::make_tiny_dataset(tmp.path("data"));
  // One rank: dropout draws from torch's global generator, which rank threads would share.
  auto spec = lora_job(data, 1, 3, 4);
  spec.model.lora.dropout = 0.2;
  const auto kept = test::run_job(spec);
  spec.train.activation_checkpointing = true;
  const auto recomputed = test::run_job(spec);
  for (std::size_t k = 0; k < 4; ++k) CHECK(relative(recomputed[0].steps[k].loss, kept[0].steps[k].loss) <= 1e-5);
  CHECK(max_difference(recomputed[0].weights, kept[0].weights) <= 1e-5);
  // Dropout makes a difference: without it the run is another.
  spec.model.lora.dropout = 0;
  CHECK(max_difference(test::run_job(spec)[0].weights, kept[0].weights) > 1e-6);
}

TEST_CASE("a LoRA run checkpoints only the adapters and their moments and exports them in peft's layout",
          "[core][train][lora][ckpt]") {
  temp_dir tmp;
  auto spec = lora_job(test::make_tiny_dataset(tmp.path("data")), 2, 2, 4);
  spec.run.checkpoint.every_steps = 2;
  for (const auto& r : test::run_workload(spec, tmp.path("run"))) REQUIRE(r.error_text() == "");

  const auto ckpt = core::ckpt::step_dir(tmp.path("run"), 4);
  const auto tensors = test::checkpoint_tensors(ckpt);
  CHECK(tensors.size() == 3 * 2 * 7 * 2);  // param, exp_avg, exp_avg_sq of A and B, 7 maps, 2 layers
  std::size_t bytes = 0;
  for (const auto& [name, value] : tensors) {
    INFO(name);
    CHECK((name.find(".lora_A.weight") != std::string::npos || name.find(".lora_B.weight") != std::string::npos));
    bytes += value.size();
  }
  CHECK(bytes == 3 * 4 * adapter_weights);  // not one base weight
  const auto m = core::ckpt::read_manifest(ckpt);
  CHECK(m.extra[core::ckpt::lora_extra_key]["base"] == spec.model.hf_dir);
  CHECK(m.extra[core::ckpt::lora_extra_key]["r"] == 4);

  // <run>/adapter: what peft.PeftModel.from_pretrained reads.
  const auto config = nlohmann::json::parse(test::read_file(tmp.path("run") + "/adapter/adapter_config.json"));
  CHECK(config["peft_type"] == "LORA");
  CHECK(config["task_type"] == "CAUSAL_LM");
  CHECK(config["r"] == 4);
  CHECK(config["lora_alpha"] == 8.0);
  CHECK(config["lora_dropout"] == 0.0);
  CHECK(config["bias"] == "none");
  CHECK(config["fan_in_fan_out"] == false);
  CHECK(config["base_model_name_or_path"] == spec.model.hf_dir);
  CHECK(config["target_modules"].get<std::vector<std::string>>() == all_targets);
  core::model::safetensors_reader adapters(tmp.path("run") + "/adapter/adapter_model.safetensors");
  CHECK(adapters.tensors().size() == 2 * 7 * 2);
  for (const auto& t : adapters.tensors()) {
    INFO(t.name);
    CHECK(t.name.rfind("base_model.model.model.layers.", 0) == 0);
    CHECK(t.dtype == "F32");
  }
  const auto& q_a = adapters.at("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
  CHECK(q_a.shape == std::vector<std::int64_t>{4, 64});
  const auto& down_b = adapters.at("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight");
  CHECK(down_b.shape == std::vector<std::int64_t>{64, 4});
  // The adapter's values are the checkpoint's masters.
  std::string stored(q_a.nbytes(), '\0');
  adapters.read(q_a, stored.data());
  CHECK(stored == tensors.at("param/model.layers.0.self_attn.q_proj.lora_A.weight"));
  // <run>/model: the base with the adapters merged, every base tensor there.
  core::model::safetensors_reader merged(tmp.path("run") + "/model/model.safetensors");
  core::model::safetensors_reader base(spec.model.hf_dir + "/model.safetensors");
  CHECK(merged.tensors().size() == base.tensors().size());
}

TEST_CASE("a LoRA job refuses a whole model's checkpoint and adapters of other target modules, naming the fields",
          "[core][train][lora][ckpt]") {
  temp_dir tmp;
  const auto data = test::make_tiny_dataset(tmp.path("data"));
  auto whole = lora_job(data, 1, 0, 2);
  whole.model.lora = {};
  whole.run.checkpoint.every_steps = 1;
  for (const auto& r : test::run_workload(whole, tmp.path("whole"))) REQUIRE(r.error_text() == "");
  auto lora = lora_job(data, 1, 0, 4);
  auto results = test::run_workload(lora, tmp.path("whole"));
  REQUIRE(results[0].error);
  CHECK_THAT(results[0].error_text(), Catch::Contains("holds a whole model") && Catch::Contains("model.lora"));

  lora.train.max_steps = 2;
  for (const auto& r : test::run_workload(lora, tmp.path("lora"))) REQUIRE(r.error_text() == "");
  lora.train.max_steps = 4;
  lora.model.lora.target_modules = {"q_proj", "v_proj"};
  results = test::run_workload(lora, tmp.path("lora"));
  REQUIRE(results[0].error);
  CHECK_THAT(results[0].error_text(), Catch::Contains("target_modules must stay"));
}

TEST_CASE("a LoRA target the model's family lacks fails the job naming the field and the allowed names",
          "[core][train][lora]") {
  temp_dir tmp;
  auto spec = lora_job(test::make_tiny_dataset(tmp.path("data")), 1, 0, 1);
  spec.model.lora.target_modules = {"q_proj", "c_attn"};
  try {
    test::run_job(spec);
    FAIL("c_attn was accepted for a Llama model");
  } catch (const std::exception& e) {
    CHECK_THAT(e.what(), Catch::Contains("model.lora.target_modules") && Catch::Contains("'c_attn'") &&
                             Catch::Contains("q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj"));
  }
}
