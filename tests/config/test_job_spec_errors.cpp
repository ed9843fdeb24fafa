// Bad job specs: every class of error names the JSON path, the offending value and what is allowed.
#include <catch2/catch.hpp>

#include "config/job_spec.hpp"
#include "tests/config/spec_test_support.hpp"

using namespace cohort::config;
using cohort::config::testing::expect_spec_error;
using cohort::config::testing::patched_spec;

namespace {

struct bad_case {
  const char* patch;     // merged into a minimal valid spec
  const char* path;      // expected spec_error::path()
  const char* value;     // the offending value as it appears in the message
  const char* allowed;   // what the message says is allowed
};

void check_bad(const bad_case& c) {
  INFO("patch: " << c.patch);
  const spec_error e = expect_spec_error([&] { parse_job_spec(patched_spec(c.patch)); });
  INFO("message: " << e.what());
  CHECK(e.path() == c.path);
  CHECK_THAT(e.what(), Catch::StartsWith(std::string(c.path) + ": "));
  CHECK_THAT(e.what(), Catch::Contains(c.value));
  CHECK_THAT(e.what(), Catch::Contains(c.allowed));
}

}  // namespace

TEST_CASE("wrong types name the field, the value and the expected type", "[config]") {
  const bad_case cases[] = {
      {R"({"scaling": {"num_workers": "4"}})", "scaling.num_workers", "\"4\"", "an integer in [1, 65536]"},
      {R"({"scaling": {"num_workers": 2.5}})", "scaling.num_workers", "2.5", "an integer"},
      {R"({"scaling": {"use_gpu": 1}})", "scaling.use_gpu", "1", "true or false"},
      {R"({"data": {"verify": "no"}})", "data.verify", "\"no\"", "true or false"},
      {R"({"scaling": []})", "scaling", "[]", "a JSON object"},
      {R"({"train": {"lr": "fast"}})", "train.lr", "\"fast\"", "a number > 0"},
      {R"({"data": {"train": 3}})", "data.train", "3", "a non-empty string"},
      {R"({"run": {"checkpoint": {"async": "yes"}}})", "run.checkpoint.async", "\"yes\"", "true or false"},
      {R"({"model": {"hf_dir": ""}})", "model.hf_dir", "\"\"", "a non-empty string"},
      {R"({"model": {"hf_dir": null, "config": 5}})", "model.config", "5", "a config.json path or an inline config object"},
      {R"({"scaling": {"resources_per_worker": [1]}})", "scaling.resources_per_worker", "[1]",
       "resource name -> quantity"},
      {R"({"scaling": {"resources_per_worker": {"CPU": "1"}}})", "scaling.resources_per_worker.CPU",
       "\"1\"", "a number >= 0"},
      {R"({"train": {"seed": -1}})", "train.seed", "-1", "an integer >= 0"},
      {R"({"deepspeed": 3})", "deepspeed", "3", "a DeepSpeed config file path or an inline object"},
  };
  for (const auto& c : cases) check_bad(c);
}

TEST_CASE("out-of-range numbers name the field, the value and the allowed range", "[config]") {
  const bad_case cases[] = {
      {R"({"scaling": {"num_workers": 0}})", "scaling.num_workers", "0", "an integer in [1, 65536]"},
      {R"({"scaling": {"num_workers": -2}})", "scaling.num_workers", "-2", "an integer in [1, 65536]"},
      {R"({"train": {"seq_len": -1}})", "train.seq_len", "-1", "an integer"},
      {R"({"train": {"micro_batch_size": 0}})", "train.micro_batch_size", "0", "an integer"},
      {R"({"train": {"grad_accum": -3}})", "train.grad_accum", "-3", "an integer"},
      {R"({"train": {"epochs": -1}})", "train.epochs", "-1", "an integer >= 0"},
      {R"({"train": {"max_steps": -5}})", "train.max_steps", "-5", "an integer >= 0"},
      {R"({"train": {"loss_chunk_tokens": -1}})", "train.loss_chunk_tokens", "-1", "an integer >= 0"},
      {R"({"train": {"lr": 0}})", "train.lr", "0", "a number > 0"},
      {R"({"train": {"lr": -0.001}})", "train.lr", "-0.001", "a number > 0"},
      {R"({"train": {"beta2": 1.0}})", "train.beta2", "1.0", "a number in [0, 1)"},
      {R"({"train": {"eps": 0}})", "train.eps", "0", "a number > 0"},
      {R"({"train": {"warmup_steps": -10}})", "train.warmup_steps", "-10", "an integer"},
      {R"({"train": {"weight_decay": -0.1}})", "train.weight_decay", "-0.1", "a number >= 0"},
      {R"({"train": {"grad_clip": -1}})", "train.grad_clip", "-1", "a number >= 0"},
      {R"({"train": {"min_lr_ratio": 1.5}})", "train.min_lr_ratio", "1.5", "a number in [0, 1]"},
      {R"({"train": {"log_every": 0}})", "train.log_every", "0", "an integer"},
      {R"({"train": {"step_delay_s": -1}})", "train.step_delay_s", "-1", "a number >= 0"},
      {R"({"zero": {"stage": 4}})", "zero.stage", "4", "an integer in [0, 3]"},
      {R"({"zero": {"stage": -1}})", "zero.stage", "-1", "an integer in [0, 3]"},
      {R"({"run": {"checkpoint": {"every_steps": -1}}})", "run.checkpoint.every_steps", "-1", "an integer >= 0"},
      {R"({"run": {"checkpoint": {"num_to_keep": -1}}})", "run.checkpoint.num_to_keep", "-1", "an integer >= 0"},
      {R"({"run": {"failure": {"max_failures": -2}}})", "run.failure.max_failures", "-2", "an integer >= -1"},
      {R"({"run": {"hold_before_step": -1}})", "run.hold_before_step", "-1", "an integer >= 0"},
      {R"({"scaling": {"num_workers": 2, "min_workers": 3}})", "scaling.min_workers", "3",
       "must be at most scaling.num_workers (2)"},
      {R"({"scaling": {"resize_interval_s": -1}})", "scaling.resize_interval_s", "-1",
       "a number in [0, 86400]"},
      {R"({"scaling": {"resize_interval_s": "soon"}})", "scaling.resize_interval_s", "soon",
       "a number in [0, 86400]"},
      {R"({"run": {"failure": {"max_preemptions": -2}}})", "run.failure.max_preemptions", "-2", "an integer >= -1"},
      {R"({"run": {"failure": {"preemption_grace_s": -1}}})", "run.failure.preemption_grace_s", "-1",
       "a number in [0, 86400]"},
      {R"({"run": {"failure": {"hang_timeout_s": 0.5}}})", "run.failure.hang_timeout_s", "0.5",
       "a number in [1, 86400]"},
      {R"({"run": {"failure": {"startup_timeout_s": 90000}}})", "run.failure.startup_timeout_s", "90000",
       "a number in [1, 86400]"},
      {R"({"run": {"failure": {"collective_timeout_s": 0}}})", "run.failure.collective_timeout_s", "0",
       "a number in [1, 86400]"},
      {R"({"scaling": {"resources_per_worker": {"CPU": -1}}})", "scaling.resources_per_worker.CPU",
       "-1", "a number >= 0"},
      {R"({"scaling": {"trainer_resources": {"large_cpu_mem": -0.01}}})",
       "scaling.trainer_resources.large_cpu_mem", "-0.01", "a number >= 0"},
  };
  for (const auto& c : cases) check_bad(c);
}

TEST_CASE("unknown enum names list the allowed names", "[config]") {
  const bad_case cases[] = {
      {R"({"scaling": {"placement_strategy": "PACKED"}})", "scaling.placement_strategy", "\"PACKED\"",
       "one of PACK, SPREAD, STRICT_PACK, STRICT_SPREAD"},
      {R"({"scaling": {"placement_strategy": "pack"}})", "scaling.placement_strategy", "\"pack\"",
       "one of PACK, SPREAD, STRICT_PACK, STRICT_SPREAD"},
      {R"({"train": {"precision": "fp16"}})", "train.precision", "\"fp16\"", "one of fp32, bf16"},
      {R"({"train": {"schedule": "step"}})", "train.schedule", "\"step\"", "one of constant, cosine, linear"},
      {R"({"train": {"compute_path": "fast"}})", "train.compute_path", "\"fast\"",
       "one of automatic, plain, fused"},
      {R"({"zero": {"offload_optimizer": "nvme"}})", "zero.offload_optimizer", "\"nvme\"", "one of none, cpu"},
      {R"({"zero": {"offload_param": "disk"}})", "zero.offload_param", "\"disk\"", "one of none, cpu"},
      {R"({"run": {"checkpoint": {"score_order": "asc"}}})", "run.checkpoint.score_order", "\"asc\"",
       "one of min, max"},
      {R"({"workload": "vision"})", "workload", "\"vision\"", "one of causal_lm, linear_regression"},
  };
  for (const auto& c : cases) check_bad(c);
}

TEST_CASE("unknown keys at every level are errors that suggest the closest known key",
          "[config]") {
  const bad_case cases[] = {
      {R"({"nmae": "x"})", "nmae", "unknown key", "did you mean \"name\"?"},
      {R"({"scaling": {"num_worker": 2}})", "scaling.num_worker", "unknown key", "did you mean \"num_workers\"?"},
      {R"({"train": {"learning_rate": 0.1}})", "train.learning_rate", "unknown key", "Allowed keys here: seq_len"},
      {R"({"zero": {"stag": 1}})", "zero.stag", "unknown key", "did you mean \"stage\"?"},
      {R"({"run": {"checkpoint": {"every_step": 5}}})", "run.checkpoint.every_step", "unknown key",
       "did you mean \"every_steps\"?"},
      {R"({"run": {"failure": {"max_failure": 5}}})", "run.failure.max_failure", "unknown key",
       "did you mean \"max_failures\"?"},
      {R"({"model": {"hf_dri": "m"}})", "model.hf_dri", "unknown key", "did you mean \"hf_dir\"?"},
      {R"({"data": {"test": "d"}})", "data.test", "unknown key", "Allowed keys here: train, eval"},
  };
  for (const auto& c : cases) check_bad(c);
}

TEST_CASE("the job name is required and limited to [A-Za-z0-9._-]", "[config]") {
  check_bad({R"({"name": null})", "name", "missing", "the job name"});
  check_bad({R"({"name": "my job"})", "name", "\"my job\"", "[A-Za-z0-9._-]"});
  check_bad({R"({"name": "../etc"})", "name", "\"../etc\"", "[A-Za-z0-9._-]"});
  check_bad({R"({"name": ""})", "name", "\"\"", "a non-empty string"});
}

TEST_CASE("rules across fields are checked", "[config]") {
  check_bad({R"({"scaling": {"resources_per_worker": {"GPU": 1}}})", "scaling.resources_per_worker.GPU",
             "use_gpu is false", "set use_gpu to true"});
  check_bad({R"({"scaling": {"use_gpu": true, "resources_per_worker": {"GPU": 0}}})",
             "scaling.resources_per_worker.GPU", "got 0", "quantity > 0"});
  check_bad({R"({"train": {"epochs": 0}})", "train", "both 0", "max_steps >= 1"});
  check_bad({R"({"train": {"max_steps": 24}, "run": {"hold_before_step": 25}})", "run.hold_before_step",
             "got 25, after the last step (train.max_steps 24)", "allowed: 0 (none) to 24"});
  check_bad({R"({"train": {"max_steps": 24}, "run": {"hold_before_steps": [3, 30]}})", "run.hold_before_steps",
             "got step 30, after the last step (train.max_steps 24)", "allowed: 1 to 24"});
  check_bad({R"({"run": {"hold_before_steps": [3, 3]}})", "run.hold_before_steps[1]", "3",
             "an integer step > 3 (the steps strictly increase)"});
  check_bad({R"({"run": {"hold_before_steps": [0]}})", "run.hold_before_steps[0]", "0", "an integer step >= 1"});
  check_bad({R"({"run": {"hold_before_steps": 4}})", "run.hold_before_steps", "4", "an array of strictly increasing"});
  check_bad({R"({"train": {"max_steps": 24}, "run": {"profile_steps": [3, 30]}})", "run.profile_steps",
             "got step 30, after the last step (train.max_steps 24)",
             "never profile there; allowed: 1 to 24"});
  check_bad({R"({"run": {"profile_steps": [5, 4]}})", "run.profile_steps[1]", "4",
             "an integer step > 5 (the steps strictly increase)"});
  check_bad({R"({"run": {"failure": {"hang_timeout_s": 60, "collective_timeout_s": 60}}})",
             "run.failure.collective_timeout_s", "is 60", "must be > run.failure.hang_timeout_s (60"});
  check_bad({R"({"run": {"failure": {"hang_timeout_s": 700, "collective_timeout_s": 900}}})",
             "run.failure.startup_timeout_s", "is 600",
             "must be >= run.failure.hang_timeout_s (700"});
  check_bad({R"({"run": {"checkpoint": {"every_steps": 4, "export_every": 6}}})", "run.checkpoint.export_every",
             "is 6", "a multiple of run.checkpoint.every_steps (4)"});
  check_bad({R"({"run": {"checkpoint": {"export_every": 6}}})", "run.checkpoint.export_every", "is 6",
             "a multiple of run.checkpoint.every_steps (0)"});
  check_bad({R"({"run": {"storage_path": "s3://bucket/runs", "checkpoint": {"every_steps": 2, "export_every": 2}}})",
             "run.checkpoint.export_every", "s3://", "set it to 0"});
  check_bad({R"({"zero": {"offload_optimizer": "cpu"}})", "zero.offload_optimizer", "\"cpu\"",
             "zero.stage 1, 2 or 3"});
  check_bad({R"({"zero": {"stage": 2, "offload_param": "cpu"}})", "zero.offload_param",
             "zero.stage 2", "needs zero.stage 3"});
  check_bad({R"({"zero": {"stage": 3, "offload_optimizer": "cpu", "delayed_param_update": true}})",
             "zero.delayed_param_update", "got true", "zero.offload_param \"cpu\""});
  check_bad({R"({"zero": {"stage": 2, "layers_kept_gathered": 4}})", "zero.layers_kept_gathered",
             "got 4 with zero.stage 2", "only stage 3"});
  check_bad({R"({"zero": {"stage": 3, "layers_kept_gathered": -1}})", "zero.layers_kept_gathered", "-1",
             "an integer >= 0"});
  check_bad({R"({"model": {"hf_dir": "a", "config": "b"}})", "model", "both", "hf_dir"});
  check_bad({R"({"model": {"hf_dir": "a", "init_seed": 1}})", "model.init_seed", "only applies",
             "config"});
  check_bad({R"({"model": {"hf_dir": null}})", "model", "needs", "hf_dir"});
  check_bad({R"({"scaling": {"resources_per_worker": {"bad name": 1}}})",
             "scaling.resources_per_worker.bad name", "\"bad name\"", "[A-Za-z0-9_.:/-]"});
}

TEST_CASE("malformed JSON and a non-object document are errors, not crashes", "[config]") {
  const spec_error syntax = expect_spec_error([] { parse_job_spec("{\"name\": "); });
  CHECK(syntax.path().empty());
  CHECK_THAT(syntax.what(), Catch::Contains("not valid JSON"));
  // A number past a double's range (found by fuzz_job_spec): JSON's parser reports it apart
  // from syntax errors.
  const spec_error overflow = expect_spec_error([] { parse_job_spec(R"({"train": {"lr": 3e333}})"); });
  CHECK_THAT(overflow.what(), Catch::Contains("not valid JSON") && Catch::Contains("3e333"));
  const spec_error array = expect_spec_error([] { parse_job_spec("[1, 2]"); });
  CHECK_THAT(array.what(), Catch::Contains("(top level): got [1,2]; expected a JSON object"));
}

TEST_CASE("model.lora is read with peft's defaults and round-trips", "[config][lora]") {
  const auto spec = parse_job_spec(patched_spec(R"({"model": {"lora": {"target_modules": ["q_proj", "v_proj"]}}})"));
  CHECK(spec.model.lora.enabled);
  CHECK(spec.model.lora.r == 8);
  CHECK(spec.model.lora.alpha == 8);
  CHECK(spec.model.lora.dropout == 0);
  CHECK(spec.model.lora.target_modules == std::vector<std::string>{"q_proj", "v_proj"});
  CHECK_FALSE(spec.model.lora.base_dtype);
  CHECK_FALSE(parse_job_spec(patched_spec("{}")).model.lora.enabled);
  const auto full = parse_job_spec(patched_spec(
      R"({"model": {"lora": {"r": 16, "alpha": 32, "dropout": 0.05, "target_modules": ["c_attn"], "base_dtype": "bf16"}}})"));
  const auto again = parse_job_spec(to_json_text(full));
  CHECK(again.model.lora.r == 16);
  CHECK(again.model.lora.alpha == 32);
  CHECK(again.model.lora.dropout == 0.05);
  CHECK(again.model.lora.target_modules == std::vector<std::string>{"c_attn"});
  CHECK(again.model.lora.base_dtype == precision::bf16);
}

TEST_CASE("bad model.lora fields name the field, the value and what is allowed", "[config][lora]") {
  check_bad({R"({"model": {"lora": {"target_modules": ["q_proj", "qkv"]}}})", "model.lora.target_modules[1]",
             "\"qkv\"", "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, c_attn, c_proj, c_fc"});
  check_bad({R"({"model": {"lora": {"target_modules": []}}})", "model.lora.target_modules", "[]",
             "a non-empty list of module names"});
  check_bad({R"({"model": {"lora": {"r": 8}}})", "model.lora.target_modules", "missing",
             "a non-empty list of module names"});
  check_bad({R"({"model": {"lora": {"target_modules": ["q_proj", "q_proj"]}}})", "model.lora.target_modules[1]",
             "\"q_proj\"", "each module name once"});
  check_bad({R"({"model": {"lora": {"r": 0, "target_modules": ["q_proj"]}}})", "model.lora.r", "0", "[1, 65536]"});
  check_bad({R"({"model": {"lora": {"dropout": 1, "target_modules": ["q_proj"]}}})", "model.lora.dropout", "1",
             "[0, 1)"});
  check_bad({R"({"model": {"lora": {"alpha": 0, "target_modules": ["q_proj"]}}})", "model.lora.alpha", "0", "> 0"});
  check_bad({R"({"model": {"lora": {"base_dtype": "fp16", "target_modules": ["q_proj"]}}})", "model.lora.base_dtype",
             "\"fp16\"", "fp32, bf16"});
  check_bad({R"({"model": {"lora": {"rank": 8, "target_modules": ["q_proj"]}}})", "model.lora.rank", "unknown key", "Allowed keys here: r, alpha, dropout"});
  check_bad({R"({"model": {"hf_dir": null, "config": "c.json", "lora": {"target_modules": ["q_proj"]}}})",
             "model.lora", "needs model.hf_dir", "frozen"});
}

TEST_CASE("model.added_tokens and model.pad_vocab_to_multiple_of are read, resolved against the spec's "
          "directory, and round-trip",
          "[config][added_tokens]") {
  const auto plain = parse_job_spec(patched_spec("{}"));
  CHECK(plain.model.added_tokens.empty());
  CHECK(plain.model.pad_vocab_to_multiple_of == 1);
  const auto spec = parse_job_spec(
      patched_spec(R"({"model": {"added_tokens": "tokens.json", "pad_vocab_to_multiple_of": 64}})"), "/jobs");
  CHECK(spec.model.added_tokens == "/jobs/tokens.json");
  CHECK(spec.model.pad_vocab_to_multiple_of == 64);
  const auto again = parse_job_spec(to_json_text(spec));
  CHECK(again.model.added_tokens == "/jobs/tokens.json");
  CHECK(again.model.pad_vocab_to_multiple_of == 64);
  CHECK(parse_job_spec(to_json_text(plain)).model.pad_vocab_to_multiple_of == 1);
}

TEST_CASE("bad model.added_tokens and model.pad_vocab_to_multiple_of name the field, the value and what is "
          "allowed",
          "[config][added_tokens]") {
  check_bad({R"({"model": {"added_tokens": ["<USER>"]}})", "model.added_tokens", "[\"<USER>\"]", "a non-empty string"});
  check_bad({R"({"model": {"added_tokens": ""}})", "model.added_tokens", "\"\"", "a non-empty string"});
  check_bad({R"({"model": {"pad_vocab_to_multiple_of": 0}})", "model.pad_vocab_to_multiple_of", "0", "[1, 65536]"});
  check_bad({R"({"model": {"pad_vocab_to_multiple_of": 2.5}})", "model.pad_vocab_to_multiple_of", "2.5", "an integer"});
  check_bad({R"({"model": {"hf_dir": null, "config": "c.json", "added_tokens": "t.json"}})", "model.added_tokens",
             "needs model.hf_dir", "vocab_size"});
  check_bad({R"({"model": {"hf_dir": null, "config": "c.json", "pad_vocab_to_multiple_of": 8}})",
             "model.pad_vocab_to_multiple_of", "needs model.hf_dir", "vocab_size"});
}
