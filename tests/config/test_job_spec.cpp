// Good job specs: every field read, defaults, path resolution, canonical JSON round trip.
#include <unistd.h>

#include <cstdlib>
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

const char* design_example = R"({
  "name": "llama-gsm8k",
  "model": {"hf_dir": "models/tiny-llama"},
  "data": {"train": "data/gsm8k-shards", "eval": "data/gsm8k-test-shards"},
  "scaling": {"num_workers": 4, "use_gpu": true, "resources_per_worker": {"GPU": 1, "CPU": 4},
              "trainer_resources": {"large_cpu_mem": 0.01}, "placement_strategy": "PACK"},
  "train": {"seq_len": 512, "micro_batch_size": 8, "grad_accum": 2, "epochs": 3, "max_steps": 0,
            "lr": 2e-5, "warmup_steps": 100, "schedule": "cosine", "weight_decay": 0.0,
            "grad_clip": 1.0, "precision": "bf16", "seed": 1234},
  "zero": {"stage": 3, "offload_optimizer": "none", "offload_param": "cpu"},
  "run": {"storage_path": "/shared/runs",
          "checkpoint": {"every_steps": 200, "num_to_keep": 3,
                         "score_attribute": "eval_loss", "score_order": "min"},
          "failure": {"max_failures": -1}}
})";

}  // namespace

TEST_CASE("the design document's example spec parses into every field", "[config]") {
  const job_spec s = parse_job_spec(design_example, "/jobs");
  CHECK(s.name == "llama-gsm8k");
  CHECK(s.workload == workload_kind::causal_lm);
  CHECK(s.model.hf_dir == "/jobs/models/tiny-llama");
  CHECK(s.data.train == "/jobs/data/gsm8k-shards");
  CHECK(s.data.eval == "/jobs/data/gsm8k-test-shards");
  CHECK(s.scaling.num_workers == 4);
  CHECK(s.scaling.use_gpu);
  CHECK(s.scaling.resources_per_worker == resource_quantities{{"CPU", 4}, {"GPU", 1}});
  CHECK(s.scaling.trainer_resources == resource_quantities{{"large_cpu_mem", 0.01}});
  CHECK(s.scaling.strategy == placement_strategy::pack);
  CHECK(s.train.seq_len == 512);
  CHECK(s.train.micro_batch_size == 8);
  CHECK(s.train.grad_accum == 2);
  CHECK(s.train.epochs == 3);
  CHECK(s.train.lr == 2e-5);
  CHECK(s.train.warmup_steps == 100);
  CHECK(s.train.schedule == lr_schedule::cosine);
  CHECK(s.train.grad_clip == 1.0);
  CHECK(s.train.dtype == precision::bf16);
  CHECK(s.train.seed == 1234);
  CHECK(s.zero.stage == 3);
  CHECK(s.zero.offload_optimizer == offload_device::none);
  CHECK(s.zero.offload_param == offload_device::cpu);
  CHECK(s.run.storage_path == "/shared/runs");
  CHECK(s.run.checkpoint.every_steps == 200);
  CHECK(s.run.checkpoint.num_to_keep == 3);
  CHECK(s.run.checkpoint.score_attribute == "eval_loss");
  CHECK(s.run.checkpoint.order == score_order::min);
  CHECK(s.run.failure.max_failures == -1);
  CHECK(global_batch(s) == 8 * 2 * 4);
}

TEST_CASE("a minimal spec gets the documented defaults", "[config]") {
  const job_spec s = parse_job_spec(R"({"name": "tiny"})");
  CHECK(s.workload == workload_kind::causal_lm);
  CHECK(s.scaling.num_workers == 1);
  CHECK_FALSE(s.scaling.use_gpu);
  CHECK(s.scaling.resources_per_worker == resource_quantities{{"CPU", 1}});
  CHECK(s.scaling.trainer_resources.empty());
  CHECK(s.scaling.strategy == placement_strategy::pack);
  CHECK(s.train.lr == 1e-4);
  CHECK(s.train.dtype == precision::fp32);
  CHECK(s.zero.stage == 0);
  CHECK(s.run.failure.max_failures == 0);
  CHECK(s.run.failure.hang_timeout_s == 120);
  CHECK(s.run.failure.startup_timeout_s == 600);
  CHECK(s.run.failure.collective_timeout_s == 300);
  CHECK(s.run.failure.preemption_grace_s == 30);
  CHECK(s.run.failure.max_preemptions == -1);
  CHECK(s.run.resume);
  CHECK(s.run.hold_before_step == 0);
  CHECK(s.run.hold_before_steps.empty());
  CHECK_FALSE(s.run.sample_log);
}

TEST_CASE("train.compute_path and train.loss_chunk_tokens default to automatic and 2048 and are "
          "kept through the spec's canonical JSON", "[config]") {
  const job_spec plain = parse_job_spec(R"({"name": "tiny"})");
  CHECK(plain.train.path == compute_path::automatic);
  CHECK(plain.train.loss_chunk_tokens == 2048);
  const job_spec s = parse_job_spec(R"({"name": "fused",
                                        "train": {"compute_path": "fused", "loss_chunk_tokens": 0}})");
  CHECK(s.train.path == compute_path::fused);
  CHECK(s.train.loss_chunk_tokens == 0);
  const job_spec again = parse_job_spec(to_json_text(s));
  CHECK(again.train.path == compute_path::fused);
  CHECK(again.train.loss_chunk_tokens == 0);
  CHECK(std::string(to_string(compute_path::plain)) == "plain");
}

TEST_CASE("train.cuda_graph defaults to true and false is kept through the spec's canonical JSON",
          "[config]") {
  CHECK(parse_job_spec(R"({"name": "tiny"})").train.cuda_graph);
  const job_spec off = parse_job_spec(R"({"name": "eager", "train": {"cuda_graph": false}})");
  CHECK_FALSE(off.train.cuda_graph);
  CHECK_FALSE(parse_job_spec(to_json_text(off)).train.cuda_graph);
}

TEST_CASE("run.hold_before_step is read and kept through the spec's canonical JSON", "[config]") {
  const job_spec s = parse_job_spec(R"({"name": "held", "train": {"max_steps": 10},
                                        "run": {"hold_before_step": 4}})");
  CHECK(s.run.hold_before_step == 4);
  CHECK(parse_job_spec(to_json_text(s)).run.hold_before_step == 4);
}

TEST_CASE("scaling.nodes is read and kept through the spec's canonical JSON, and refuses bad or repeated "
          "names by index",
          "[config]") {
  const job_spec s = parse_job_spec(R"({"name": "pinned", "scaling": {"nodes": ["n2", "gpu-1.example:a"]}})");
  CHECK(s.scaling.nodes == std::vector<std::string>{"n2", "gpu-1.example:a"});
  CHECK(parse_job_spec(to_json_text(s)).scaling.nodes == s.scaling.nodes);
  CHECK(parse_job_spec(R"({"name": "free"})").scaling.nodes.empty());
  auto e = expect_spec_error([] { parse_job_spec(R"({"name": "x", "scaling": {"nodes": "n1"}})"); });
  CHECK(e.path() == "scaling.nodes");
  CHECK_THAT(e.what(), Catch::Contains("an array of node names"));
  e = expect_spec_error([] { parse_job_spec(R"({"name": "x", "scaling": {"nodes": ["n1", "bad name"]}})"); });
  CHECK(e.path() == "scaling.nodes[1]");
  CHECK_THAT(e.what(), Catch::Contains("\"bad name\"") && Catch::Contains("[A-Za-z0-9._:-]"));
  e = expect_spec_error([] { parse_job_spec(R"({"name": "x", "scaling": {"nodes": ["n1", "n1"]}})"); });
  CHECK(e.path() == "scaling.nodes[1]");
  CHECK_THAT(e.what(), Catch::Contains("named twice"));
}

TEST_CASE(
    "run.hold_before_steps, run.profile_steps and run.sample_log are read and kept through the spec's "
    "canonical JSON",
    "[config]") {
  const job_spec s = parse_job_spec(R"({"name": "held", "train": {"max_steps": 10},
                                        "run": {"hold_before_steps": [2, 5, 9], "sample_log": true,
                                                "profile_steps": [4, 5, 10]}})");
  CHECK(s.run.profile_steps == std::vector<std::int64_t>{4, 5, 10});
  CHECK(parse_job_spec(R"({"name": "plain"})").run.profile_steps.empty());
  CHECK(parse_job_spec(to_json_text(s)).run.profile_steps == s.run.profile_steps);
  CHECK(s.run.hold_before_steps == std::vector<std::int64_t>{2, 5, 9});
  CHECK(s.run.sample_log);
  CHECK(has_holds(s.run));
  CHECK(holds_before(s.run, 5));
  CHECK_FALSE(holds_before(s.run, 4));
  const job_spec again = parse_job_spec(to_json_text(s));
  CHECK(again.run.hold_before_steps == s.run.hold_before_steps);
  CHECK(again.run.sample_log);
  CHECK_FALSE(has_holds(parse_job_spec(R"({"name": "free"})").run));
}

TEST_CASE("train.eval_every and run.memory_status_every_s default to off, are read and round-trip",
          "[config]") {
  const job_spec plain = parse_job_spec(R"({"name": "plain"})");
  CHECK(plain.train.eval_every == 0);
  CHECK(plain.run.memory_status_every_s == 0.0);
  const job_spec s = parse_job_spec(R"({"name": "watched", "data": {"train": "/d/train", "eval": "/d/eval"},
                                        "train": {"eval_every": 50},
                                        "run": {"memory_status_every_s": 2.5,
                                                "checkpoint": {"score_attribute": "eval_loss"}}})");
  CHECK(s.train.eval_every == 50);
  CHECK(s.run.memory_status_every_s == 2.5);
  const job_spec again = parse_job_spec(to_json_text(s));
  CHECK(again.train.eval_every == 50);
  CHECK(again.run.memory_status_every_s == 2.5);
  CHECK(again.run.checkpoint.score_attribute == "eval_loss");
}

TEST_CASE("a score_attribute that names no metric the job records is refused, naming it and the allowed ones",
          "[config]") {
  const auto e = expect_spec_error(
      [] { parse_job_spec(R"({"name": "j", "run": {"checkpoint": {"score_attribute": "accuracy"}}})"); });
  CHECK(e.path() == "run.checkpoint.score_attribute");
  const std::string what = e.what();
  CHECK_THAT(what, Catch::Contains("\"accuracy\"") && Catch::Contains("\"loss\"") &&
                       Catch::Contains("\"tokens_per_s\"") && Catch::Contains("\"mfu\"") &&
                       Catch::Contains("need data.eval"));
  // eval_loss needs an eval data set to be recorded.
  const auto no_eval = expect_spec_error(
      [] { parse_job_spec(R"({"name": "j", "run": {"checkpoint": {"score_attribute": "eval_loss"}}})"); });
  CHECK(no_eval.path() == "run.checkpoint.score_attribute");
  CHECK_THAT(std::string(no_eval.what()), Catch::Contains("\"eval_loss\""));
  for (const char* ok : {"loss", "lr", "grad_norm", "tokens_per_s", "mfu", ""})
    CHECK_NOTHROW(parse_job_spec(std::string(R"({"name": "j", "run": {"checkpoint": {"score_attribute": ")") + ok +
                                 "\"}}}"));
  CHECK_NOTHROW(parse_job_spec(R"({"name": "j", "data": {"eval": "/e"},
                                   "run": {"checkpoint": {"score_attribute": "eval_perplexity"}}})"));
  CHECK(score_attributes(parse_job_spec(R"({"name": "j", "data": {"eval": "/e"}})")) ==
        std::vector<std::string>{"loss", "lr", "grad_norm", "tokens_per_s", "mfu", "eval_loss", "eval_perplexity"});
}

TEST_CASE("train.eval_every without data.eval and a negative memory_status_every_s are refused by name",
          "[config]") {
  const auto e = expect_spec_error([] { parse_job_spec(R"({"name": "j", "train": {"eval_every": 10}})"); });
  CHECK(e.path() == "train.eval_every");
  CHECK_THAT(std::string(e.what()), Catch::Contains("data.eval"));
  const auto m = expect_spec_error([] { parse_job_spec(R"({"name": "j", "run": {"memory_status_every_s": -1}})"); });
  CHECK(m.path() == "run.memory_status_every_s");
}

TEST_CASE("run.checkpoint.replicate defaults to off, is read, and is refused with zero.stage 0 by name",
          "[config]") {
  CHECK_FALSE(parse_job_spec(R"({"name": "j"})").run.checkpoint.replicate);
  const auto on = parse_job_spec(R"({"name": "j", "zero": {"stage": 1}, "run": {"checkpoint": {"replicate": true}}})");
  CHECK(on.run.checkpoint.replicate);
  CHECK(parse_job_spec(to_json_text(on)).run.checkpoint.replicate);
  const auto e = expect_spec_error(
      [] { parse_job_spec(R"({"name": "j", "run": {"checkpoint": {"replicate": true}}})"); });
  CHECK(e.path() == "run.checkpoint.replicate");
  CHECK_THAT(std::string(e.what()), Catch::Contains("zero.stage 1, 2 or 3"));
  const auto bad = expect_spec_error(
      [] { parse_job_spec(R"({"name": "j", "run": {"checkpoint": {"replicate": "yes"}}})"); });
  CHECK(bad.path() == "run.checkpoint.replicate");
}

TEST_CASE(
    "run.checkpoint.replicate_every defaults to 0, is read with replicate, and is refused without "
    "it or negative by name",
    "[config]") {
  CHECK(parse_job_spec(R"({"name": "j"})").run.checkpoint.replicate_every == 0);
  const auto on = parse_job_spec(
      R"({"name": "j", "zero": {"stage": 1}, "run": {"checkpoint": {"replicate": true, "replicate_every": 3}}})");
  CHECK(on.run.checkpoint.replicate_every == 3);
  CHECK(parse_job_spec(to_json_text(on)).run.checkpoint.replicate_every == 3);
  const auto alone = expect_spec_error([] {
    parse_job_spec(R"({"name": "j", "zero": {"stage": 1}, "run": {"checkpoint": {"replicate_every": 3}}})");
  });
  CHECK(alone.path() == "run.checkpoint.replicate_every");
  CHECK_THAT(std::string(alone.what()),
             Catch::Contains("run.checkpoint.replicate true") && Catch::Contains("allowed otherwise: 0"));
  const auto negative = expect_spec_error([] {
    parse_job_spec(
        R"({"name": "j", "zero": {"stage": 1}, "run": {"checkpoint": {"replicate": true, "replicate_every": -2}}})");
  });
  CHECK(negative.path() == "run.checkpoint.replicate_every");
  // Zero without replicate is the default, not refused.
  CHECK(parse_job_spec(R"({"name": "j", "run": {"checkpoint": {"replicate_every": 0}}})")
            .run.checkpoint.replicate_every == 0);
}

TEST_CASE("use_gpu adds one GPU per worker unless resources_per_worker names GPUs", "[config]") {
  CHECK(parse_job_spec(R"({"name": "g", "scaling": {"use_gpu": true}})").scaling.resources_per_worker ==
        resource_quantities{{"CPU", 1}, {"GPU", 1}});
  CHECK(parse_job_spec(R"({"name": "g", "scaling": {"use_gpu": true,
                          "resources_per_worker": {"CPU": 2}}})")
            .scaling.resources_per_worker == resource_quantities{{"CPU", 2}, {"GPU", 1}});
  CHECK(parse_job_spec(R"({"name": "g", "scaling": {"use_gpu": true,
                          "resources_per_worker": {"GPU": 0.5}}})")
            .scaling.resources_per_worker == resource_quantities{{"GPU", 0.5}});
}

TEST_CASE("relative paths resolve against the spec's directory and absolute paths stay",
          "[config]") {
  const job_spec s = parse_job_spec(
      R"({"name": "p", "model": {"config": "cfg/config.json", "init_seed": 7},
          "data": {"train": "/abs/train"}, "run": {"storage_path": "../runs"}})",
      "/work/jobs");
  CHECK(s.model.config_file == "/work/jobs/cfg/config.json");
  CHECK(s.model.init_seed == 7);
  CHECK(s.data.train == "/abs/train");
  CHECK(s.run.storage_path == "/work/runs");
  CHECK(parse_job_spec(R"({"name": "p", "data": {"train": "d"}})").data.train == "d");
}

TEST_CASE("an s3:// storage path stays as given, with its endpoint and local directory, and survives the wire",
          "[config]") {
  const job_spec s = parse_job_spec(
      R"({"name": "p", "run": {"storage_path": "s3://my-bucket/team/runs/", "s3_endpoint": "http://127.0.0.1:9000",
                               "local_dir": "scratch"}})",
      "/work/jobs");
  CHECK(s.run.storage_path == "s3://my-bucket/team/runs");
  CHECK(s.run.s3_endpoint == "http://127.0.0.1:9000");
  CHECK(s.run.local_dir == "/work/jobs/scratch");
  const job_spec sent = parse_job_spec(to_json_text(s));
  CHECK(sent.run.storage_path == s.run.storage_path);
  CHECK(sent.run.s3_endpoint == s.run.s3_endpoint);
  CHECK(sent.run.local_dir == s.run.local_dir);
}

TEST_CASE("a malformed s3:// storage path or endpoint is refused naming the field and the allowed form",
          "[config]") {
  const auto bucket = expect_spec_error(
      [] { parse_job_spec(R"({"name": "p", "run": {"storage_path": "s3://My_Bucket/x"}})"); });
  CHECK(bucket.path() == "run.storage_path");
  CHECK_THAT(bucket.what(), Catch::StartsWith("run.storage_path: \"s3://My_Bucket/x\" is not a usable S3 location") &&
                                Catch::Contains("expected s3://BUCKET or s3://BUCKET/PREFIX"));
  const auto empty = expect_spec_error(
      [] { parse_job_spec(R"({"name": "p", "run": {"storage_path": "s3://bucket//x"}})"); });
  CHECK_THAT(empty.what(), Catch::Contains("empty path component"));
  const auto endpoint = expect_spec_error(
      [] { parse_job_spec(R"({"name": "p", "run": {"s3_endpoint": "127.0.0.1:9000"}})"); });
  CHECK(endpoint.path() == "run.s3_endpoint");
  CHECK_THAT(endpoint.what(), Catch::Contains("http(s)://HOST[:PORT]"));
  const auto eval = expect_spec_error([] { parse_job_spec(R"({"name": "p", "data": {"eval": "s3://bucket/shards"}})"); });
  CHECK(eval.path() == "data.eval");
  CHECK_THAT(eval.what(), Catch::Contains("only data.train may be in S3"));
  const auto bucket_of_data = expect_spec_error([] { parse_job_spec(R"({"name": "p", "data": {"train": "s3://x"}})"); });
  CHECK(bucket_of_data.path() == "data.train");
  const auto small = expect_spec_error([] { parse_job_spec(R"({"name": "p", "data": {"cache_bytes": 1000}})"); });
  CHECK(small.path() == "data.cache_bytes");
  CHECK_THAT(small.what(), Catch::Contains("at least 1048576"));
}

TEST_CASE("data.train in S3 stays as given, with its cache directory and budget, and survives the wire", "[config]") {
  const job_spec s = parse_job_spec(
      R"({"name": "p", "data": {"train": "s3://data-bucket/sets/gsm8k", "cache_dir": "cache", "cache_bytes": 2000000000}})",
      "/work/jobs");
  CHECK(s.data.train == "s3://data-bucket/sets/gsm8k");
  CHECK(s.data.cache_dir == "/work/jobs/cache");
  CHECK(s.data.cache_bytes == 2000000000);
  const job_spec sent = parse_job_spec(to_json_text(s));
  CHECK(sent.data.train == s.data.train);
  CHECK(sent.data.cache_dir == s.data.cache_dir);
  CHECK(sent.data.cache_bytes == s.data.cache_bytes);
  CHECK(parse_job_spec(R"({"name": "p"})").data.cache_bytes == std::uint64_t{10} << 30);
  // Integers may be written 2e9, as everywhere in a spec; 2000000.5 is no integer.
  CHECK(parse_job_spec(R"({"name": "p", "data": {"cache_bytes": 2e9}})").data.cache_bytes == 2000000000);
  const auto fraction = expect_spec_error([] { parse_job_spec(R"({"name": "p", "data": {"cache_bytes": 2000000.5}})"); });
  CHECK(fraction.path() == "data.cache_bytes");
}

TEST_CASE(
    "model.hf_dir in S3 stays as given, in canonical form, survives the wire, and a malformed one is refused",
    "[config]") {
  const job_spec s =
      parse_job_spec(R"({"name": "p", "model": {"hf_dir": "s3://models/meta/llama-2-7b/"}})", "/work/jobs");
  CHECK(s.model.hf_dir == "s3://models/meta/llama-2-7b");
  CHECK(parse_job_spec(to_json_text(s)).model.hf_dir == s.model.hf_dir);
  const auto bad =
      expect_spec_error([] { parse_job_spec(R"({"name": "p", "model": {"hf_dir": "s3://Models/x"}})"); });
  CHECK(bad.path() == "model.hf_dir");
  CHECK_THAT(bad.what(), Catch::Contains("expected s3://BUCKET or s3://BUCKET/PREFIX"));
}

TEST_CASE("an inline model config is kept as serialized JSON", "[config]") {
  const job_spec s = parse_job_spec(
      R"({"name": "p", "model": {"config": {"model_type": "gpt2", "n_layer": 2}, "init_seed": 3}})");
  CHECK(s.model.config_file.empty());
  CHECK(nlohmann::json::parse(s.model.inline_config_json) ==
        nlohmann::json({{"model_type", "gpt2"}, {"n_layer", 2}}));
  CHECK(s.model.init_seed == 3);
}

TEST_CASE("to_json_text is canonical and round-trips through parse_job_spec", "[config]") {
  const auto check_round_trip = [](const job_spec& s) {
    const std::string text = to_json_text(s);
    const job_spec again = parse_job_spec(text);
    CHECK(to_json_text(again) == text);
    return again;
  };
  const job_spec full = check_round_trip(parse_job_spec(design_example, "/jobs"));
  CHECK(full.scaling.trainer_resources == resource_quantities{{"large_cpu_mem", 0.01}});
  CHECK(full.train.lr == 2e-5);
  CHECK(full.model.hf_dir == "/jobs/models/tiny-llama");

  const job_spec inline_model = check_round_trip(parse_job_spec(
      R"({"name": "p", "workload": "causal_lm", "model": {"config": {"n_embd": 64}, "init_seed": 9},
          "train": {"seed": 18446744073709551615, "step_delay_s": 0.25}})"));
  CHECK(inline_model.model.init_seed == 9);
  CHECK(inline_model.train.seed == 18446744073709551615ull);
  CHECK(inline_model.train.step_delay_s == 0.25);

  const job_spec regression = check_round_trip(parse_job_spec(
      R"({"name": "lr", "workload": "linear_regression", "scaling": {"num_workers": 3,
          "placement_strategy": "STRICT_SPREAD"}, "train": {"max_steps": 50, "epochs": 0}})"));
  CHECK(regression.workload == workload_kind::linear_regression);
  CHECK(regression.scaling.strategy == placement_strategy::strict_spread);
  CHECK(regression.train.max_steps == 50);
}

TEST_CASE("enum names are the JSON spellings", "[config]") {
  CHECK(std::string(to_string(placement_strategy::strict_spread)) == "STRICT_SPREAD");
  CHECK(std::string(to_string(placement_strategy::pack)) == "PACK");
  CHECK(std::string(to_string(lr_schedule::cosine)) == "cosine");
  CHECK(std::string(to_string(precision::bf16)) == "bf16");
  CHECK(std::string(to_string(offload_device::cpu)) == "cpu");
  CHECK(std::string(to_string(workload_kind::linear_regression)) == "linear_regression");
  CHECK(std::string(to_string(score_order::max)) == "max");
}

TEST_CASE("check_runnable asks causal_lm jobs for a model and training data", "[config]") {
  CHECK_NOTHROW(check_runnable(parse_job_spec(patched_spec("{}"))));
  CHECK_NOTHROW(check_runnable(parse_job_spec(R"({"name": "r", "workload": "linear_regression"})")));
  CHECK(expect_spec_error([] { check_runnable(parse_job_spec(patched_spec(R"({"model": null})"))); })
            .path() == "model");
  CHECK(expect_spec_error([] { check_runnable(parse_job_spec(patched_spec(R"({"data": null})"))); })
            .path() == "data.train");
}

TEST_CASE("load_job_spec reads a file and resolves paths against its directory", "[config]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("cohort_test_config_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream(dir / "job.json") << R"({"name": "file-job", "data": {"train": "shards"}})";
  }
  const job_spec s = load_job_spec((dir / "job.json").string());
  CHECK(s.name == "file-job");
  CHECK(s.data.train == (dir / "shards").string());

  const spec_error missing = expect_spec_error([&] { load_job_spec((dir / "nope.json").string()); });
  CHECK_THAT(missing.what(), Catch::Contains("nope.json"));
  fs::remove_all(dir);
}

TEST_CASE("data.verify is on by default, false turns it off and it round-trips", "[config]") {
  CHECK(parse_job_spec(R"({"name": "v", "data": {"train": "/d"}})").data.verify);
  const job_spec off = parse_job_spec(R"({"name": "v", "data": {"train": "/d", "verify": false}})");
  CHECK_FALSE(off.data.verify);
  CHECK_FALSE(parse_job_spec(to_json_text(off)).data.verify);
  CHECK(parse_job_spec(to_json_text(parse_job_spec(R"({"name": "v", "data": {"train": "/d"}})"))).data.verify);
}

TEST_CASE("load_job_spec sends every relative path absolute, whatever the working directory",
          "[config]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("cohort_test_config_rel_" + std::to_string(::getpid()));
  fs::create_directories(dir / "jobs");
  {
    std::ofstream(dir / "jobs" / "job.json")
        << R"({"name": "rel", "model": {"config": "cfg.json", "init_seed": 1},
              "data": {"train": "data/train", "eval": "../eval"},
              "run": {"storage_path": "runs"}})";
    std::ofstream(dir / "jobs" / "default.json") << R"({"name": "d", "model": {"hf_dir": "./hf"}})";
  }
  const fs::path before = fs::current_path();
  fs::current_path(dir);  // a relative spec path, as `submit run jobs/job.json` gives it
  const job_spec s = load_job_spec("jobs/job.json");
  const job_spec d = load_job_spec("jobs/default.json");
  fs::current_path(before);
  CHECK(s.model.config_file == (dir / "jobs" / "cfg.json").string());
  CHECK(s.data.train == (dir / "jobs" / "data" / "train").string());
  CHECK(s.data.eval == (dir / "eval").string());
  CHECK(s.run.storage_path == (dir / "jobs" / "runs").string());
  CHECK(d.model.hf_dir == (dir / "jobs" / "hf").string());
  // The default storage path is where --local has always written it: the working directory.
  CHECK(d.run.storage_path == (dir / "runs").string());
  // What goes on the wire keeps them absolute.
  const job_spec sent = parse_job_spec(to_json_text(s));
  CHECK(sent.data.train == s.data.train);
  CHECK(sent.run.storage_path == s.run.storage_path);
  fs::remove_all(dir);
}

TEST_CASE("an attempt on fewer workers keeps the global batch through more accumulation, and refuses "
          "a world size that cannot",
          "[config]") {
  const job_spec s = parse_job_spec(
      R"({"name": "elastic", "scaling": {"num_workers": 4, "min_workers": 2}, "train": {"grad_accum": 3}})");
  CHECK(s.scaling.min_workers == 2);
  CHECK(parse_job_spec(to_json_text(s)).scaling.min_workers == 2);
  CHECK(s.scaling.resize_interval_s == 60);  // the documented default
  const job_spec eager = parse_job_spec(R"({"name": "elastic", "scaling": {"resize_interval_s": 0}})");
  CHECK(eager.scaling.resize_interval_s == 0);
  CHECK(parse_job_spec(to_json_text(eager)).scaling.resize_interval_s == 0);
  const job_spec two = shrunk_to(s, 2);
  CHECK(two.scaling.num_workers == 2);
  CHECK(two.train.grad_accum == 6);
  CHECK(global_batch(two) == global_batch(s));
  CHECK_THROWS_WITH(shrunk_to(s, 5), Catch::Contains("an attempt on 5 of 4 workers"));
  CHECK(shrunk_to(s, 3).train.grad_accum == 4);
  const job_spec one_each = parse_job_spec(R"({"name": "elastic", "scaling": {"num_workers": 4}})");
  CHECK_THROWS_WITH(shrunk_to(one_each, 3), Catch::Contains("= 4 is not a multiple of 3"));
}
