// The "deepspeed" block: mapping onto cohort fields, "auto", conflicts and unsupported keys.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "config/job_spec.hpp"
#include "tests/config/spec_test_support.hpp"

using namespace cohort::config;
using cohort::config::testing::expect_spec_error;
using cohort::config::testing::patched_spec;

namespace {

job_spec with_deepspeed(const std::string& ds, const std::string& extra = "{}") {
  nlohmann::json patch = nlohmann::json::parse(extra);
  patch["deepspeed"] = nlohmann::json::parse(ds);
  return parse_job_spec(patched_spec(patch.dump()));
}

spec_error deepspeed_error(const std::string& ds, const std::string& extra = "{}") {
  return expect_spec_error([&] { with_deepspeed(ds, extra); });
}

const char* full_ds_config = R"({
  "train_batch_size": 32,
  "train_micro_batch_size_per_gpu": 4,
  "gradient_accumulation_steps": 2,
  "gradient_clipping": 0.5,
  "steps_per_print": 10,
  "wall_clock_breakdown": false,
  "bf16": {"enabled": true},
  "fp16": {"enabled": false},
  "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": true},
                        "overlap_comm": true, "contiguous_gradients": true,
                        "reduce_bucket_size": 5e8},
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-6,
                                             "weight_decay": 0.1}},
  "scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 50,
                "total_num_steps": 1000, "cos_min_ratio": 0.1, "warmup_min_ratio": 0}}
})";

}  // namespace

TEST_CASE("a DeepSpeed config maps onto cohort's fields", "[config]") {
  const job_spec s = with_deepspeed(full_ds_config, R"({"scaling": {"num_workers": 4}})");
  CHECK(s.train.micro_batch_size == 4);
  CHECK(s.train.grad_accum == 2);
  CHECK(s.train.grad_clip == 0.5);
  CHECK(s.train.dtype == precision::bf16);
  CHECK(s.zero.stage == 2);
  CHECK(s.zero.offload_optimizer == offload_device::cpu);
  CHECK(s.train.lr == 3e-4);
  CHECK(s.train.beta1 == 0.9);
  CHECK(s.train.beta2 == 0.95);
  CHECK(s.train.eps == 1e-6);
  CHECK(s.train.weight_decay == 0.1);
  CHECK(s.train.schedule == lr_schedule::cosine);
  CHECK(s.train.warmup_steps == 50);
  CHECK(s.train.max_steps == 1000);
  CHECK(s.train.min_lr_ratio == 0.1);
  // The canonical form carries the mapped values, not the DeepSpeed block.
  CHECK(to_json_text(parse_job_spec(to_json_text(s))) == to_json_text(s));
  CHECK(to_json_text(s).find("deepspeed") == std::string::npos);
}

TEST_CASE("DeepSpeed schedulers map to cohort's warmup plus schedule", "[config]") {
  const job_spec warmup = with_deepspeed(
      R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 0.002,
          "warmup_num_steps": 10, "warmup_type": "linear"}}})");
  CHECK(warmup.train.schedule == lr_schedule::constant);
  CHECK(warmup.train.lr == 0.002);
  CHECK(warmup.train.warmup_steps == 10);
  const job_spec decay = with_deepspeed(
      R"({"scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 300,
          "warmup_num_steps": 30}}})");
  CHECK(decay.train.schedule == lr_schedule::linear);
  CHECK(decay.train.max_steps == 300);
  CHECK(decay.train.warmup_steps == 30);
}

TEST_CASE("DeepSpeed \"auto\" values leave cohort's values", "[config]") {
  const job_spec s = with_deepspeed(
      R"({"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
          "train_batch_size": "auto", "gradient_clipping": "auto", "bf16": {"enabled": "auto"},
          "zero_optimization": {"stage": "auto"},
          "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}}})",
      R"({"train": {"micro_batch_size": 6, "grad_accum": 3, "lr": 0.01, "precision": "bf16"},
          "zero": {"stage": 1}})");
  CHECK(s.train.micro_batch_size == 6);
  CHECK(s.train.grad_accum == 3);
  CHECK(s.train.lr == 0.01);
  CHECK(s.train.dtype == precision::bf16);
  CHECK(s.zero.stage == 1);
  CHECK(s.train.grad_clip == 1.0);
}

TEST_CASE("DeepSpeed values equal to explicit cohort values are accepted", "[config]") {
  const job_spec s = with_deepspeed(R"({"train_micro_batch_size_per_gpu": 8, "zero_optimization":
                                        {"stage": 3}})",
                                    R"({"train": {"micro_batch_size": 8}, "zero": {"stage": 3}})");
  CHECK(s.train.micro_batch_size == 8);
  CHECK(s.zero.stage == 3);
}

TEST_CASE("DeepSpeed values that contradict explicit cohort fields are conflicts", "[config]") {
  const spec_error batch = deepspeed_error(R"({"train_micro_batch_size_per_gpu": 8})",
                                           R"({"train": {"micro_batch_size": 4}})");
  CHECK(batch.path() == "deepspeed.train_micro_batch_size_per_gpu");
  CHECK_THAT(batch.what(), Catch::Contains("8") && Catch::Contains("conflicts with train.micro_batch_size = 4"));

  const spec_error stage = deepspeed_error(R"({"zero_optimization": {"stage": 2}})",
                                           R"({"zero": {"stage": 3}})");
  CHECK(stage.path() == "deepspeed.zero_optimization.stage");
  CHECK_THAT(stage.what(), Catch::Contains("conflicts with zero.stage = 3"));

  const spec_error bf16 = deepspeed_error(R"({"bf16": {"enabled": false}})",
                                          R"({"train": {"precision": "bf16"}})");
  CHECK(bf16.path() == "deepspeed.bf16.enabled");
  CHECK_THAT(bf16.what(), Catch::Contains("train.precision = \"fp32\"") &&
                              Catch::Contains("conflicts with train.precision = \"bf16\""));

  const spec_error schedule = deepspeed_error(R"({"scheduler": {"type": "WarmupLR"}})",
                                              R"({"train": {"schedule": "cosine"}})");
  CHECK(schedule.path() == "deepspeed.scheduler.type");

  // Inside the DeepSpeed block too: the scheduler's peak lr against the optimizer's lr.
  const spec_error lr = deepspeed_error(
      R"({"optimizer": {"type": "Adam", "params": {"lr": 0.001}},
          "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 0.002}}})");
  CHECK(lr.path() == "deepspeed.scheduler.params.warmup_max_lr");
  CHECK_THAT(lr.what(), Catch::Contains("conflicts with deepspeed.optimizer.params.lr = 0.001"));

  const spec_error offload = deepspeed_error(
      R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}})",
      R"({"zero": {"offload_optimizer": "none"}})");
  CHECK(offload.path() == "deepspeed.zero_optimization.offload_optimizer.device");
}

TEST_CASE("offload_param.device maps onto zero.offload_param and needs stage 3", "[config]") {
  const job_spec s = with_deepspeed(
      R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu", "pin_memory": true},
                                "offload_optimizer": {"device": "cpu"}}})");
  CHECK(s.zero.offload_param == offload_device::cpu);
  CHECK(s.zero.offload_optimizer == offload_device::cpu);
  CHECK(with_deepspeed(R"({"zero_optimization": {"stage": 3}})").zero.offload_param ==
        offload_device::none);
  const spec_error e =
      deepspeed_error(R"({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}})");
  CHECK_THAT(e.what(), Catch::Contains("offload_param") && Catch::Contains("zero.stage 3"));
}

TEST_CASE("train_batch_size must equal micro batch x accumulation x workers", "[config]") {
  CHECK_NOTHROW(with_deepspeed(R"({"train_batch_size": 24, "train_micro_batch_size_per_gpu": 2,
                                   "gradient_accumulation_steps": 4})",
                               R"({"scaling": {"num_workers": 3}})"));
  const spec_error e = deepspeed_error(R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2})",
                                       R"({"scaling": {"num_workers": 3}})");
  CHECK(e.path() == "deepspeed.train_batch_size");
  CHECK_THAT(e.what(), Catch::Contains("got 64") && Catch::Contains("2 x 1 x 3 = 6"));
}

TEST_CASE("DeepSpeed settings cohort cannot honour are errors naming them", "[config]") {
  struct ds_case {
    const char* ds;
    const char* path;
    const char* text;
  };
  const ds_case cases[] = {
      {R"({"fp16": {"enabled": true}})", "deepspeed.fp16.enabled", "bf16"},
      {R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}})",
       "deepspeed.zero_optimization.offload_param.device", "one of none, cpu"},
      {R"({"zero_optimization": {"offload_optimizer": {"device": "nvme"}}})",
       "deepspeed.zero_optimization.offload_optimizer.device", "one of none, cpu"},
      {R"({"optimizer": {"type": "Lamb"}})", "deepspeed.optimizer.type", "\"AdamW\" or \"Adam\""},
      {R"({"optimizer": {"type": "Adam", "params": {"adam_w_mode": false}}})",
       "deepspeed.optimizer.params.adam_w_mode", "true"},
      {R"({"optimizer": {"type": "AdamW", "params": {"momentum": 0.9}}})",
       "deepspeed.optimizer.params.momentum", "unknown key"},
      {R"({"scheduler": {"type": "OneCycle"}})", "deepspeed.scheduler.type", "WarmupCosineLR"},
      {R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_type": "log"}}})",
       "deepspeed.scheduler.params.warmup_type", "one of linear"},
      {R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 1e-5}}})",
       "deepspeed.scheduler.params.warmup_min_lr", "0 (cohort warms up linearly from 0)"},
      {R"({"activation_checkpointing": {"partition_activations": true}})",
       "deepspeed.activation_checkpointing", "unknown key"},
      {R"({"zero_optimization": {"stage": 5}})", "deepspeed.zero_optimization.stage", "an integer in [0, 3]"},
      {R"({"train_micro_batch_size_per_gpu": 0})", "deepspeed.train_micro_batch_size_per_gpu", "an integer"},
      {R"({"gradient_clipping": -1})", "deepspeed.gradient_clipping", "a number >= 0"},
      {R"({"optimizer": {"params": {"betas": [0.9]}}})", "deepspeed.optimizer.params.betas", "[beta1, beta2]"},
      {R"({"gradient_acumulation_steps": 2})", "deepspeed.gradient_acumulation_steps",
       "did you mean \"gradient_accumulation_steps\"?"},
  };
  for (const auto& c : cases) {
    INFO("deepspeed: " << c.ds);
    const spec_error e = deepspeed_error(c.ds);
    INFO("message: " << e.what());
    CHECK(e.path() == c.path);
    CHECK_THAT(e.what(), Catch::Contains(c.text));
  }
}

TEST_CASE("a DeepSpeed config file is read relative to the job spec", "[config]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("cohort_test_ds_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  { std::ofstream(dir / "ds.json") << R"({"zero_optimization": {"stage": 1}, "steps_per_print": 5})"; }
  { std::ofstream(dir / "broken.json") << R"({"zero_optimization": )"; }
  const job_spec s = parse_job_spec(R"({"name": "f", "deepspeed": "ds.json"})", dir.string());
  CHECK(s.zero.stage == 1);

  const spec_error missing = expect_spec_error(
      [&] { parse_job_spec(R"({"name": "f", "deepspeed": "nope.json"})", dir.string()); });
  CHECK(missing.path() == "deepspeed");
  CHECK_THAT(missing.what(), Catch::Contains("nope.json"));
  const spec_error broken = expect_spec_error(
      [&] { parse_job_spec(R"({"name": "f", "deepspeed": "broken.json"})", dir.string()); });
  CHECK_THAT(broken.what(), Catch::Contains("broken.json") && Catch::Contains("not valid JSON"));
  fs::remove_all(dir);
}
