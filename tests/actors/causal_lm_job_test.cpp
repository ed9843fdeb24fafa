// A causal_lm job run through the embedded cluster as a user submits it: two workers train a
// tiny Llama on a tiny data set and rank 0's metrics.jsonl has every logged step; its checkpoints
// as Hugging Face directories (run.checkpoint.export_every).
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "actors/local_cluster.hpp"
#include "core/ckpt/hf_export.hpp"
#include "core/ckpt/reader.hpp"
#include "tests/core/train/tiny_data.hpp"
#include "tests/support/files.hpp"
#include "tests/support/json_lines.hpp"
#include "tests/support/temp_dir.hpp"

using namespace cohort::actors;
using namespace std::chrono_literals;

namespace {

// The tiny Llama job of these tests on the data set in `data`, two workers, ZeRO-2, its run in
// `storage`: `train` and `run` add to those objects (each starting with a comma, or empty).
std::string lm_job(const std::string& data, const std::string& storage, int steps, const std::string& train,
                   const std::string& run) {
  return R"({"name": "lm", "workload": "causal_lm",
    "model": {"config": )" + cohort::test::tiny_llama_config() + R"(, "init_seed": 7},
    "data": {"train": ")" + data + R"("},
    "scaling": {"num_workers": 2, "resources_per_worker": {"CPU": 1}},
    "train": {"seq_len": 16, "micro_batch_size": 2, "grad_accum": 2, "max_steps": )" + std::to_string(steps) +
         R"(, "lr": 0.01)" + train + R"(},
    "zero": {"stage": 2},
    "run": {"storage_path": ")" + storage + "\"" + run + "}}";
}

}  // namespace

TEST_CASE("a causal_lm job on two workers trains a tiny Llama and logs every second step",
          "[actors]") {
  cohort::test::temp_dir dir;
  const auto data = cohort::test::make_tiny_dataset((dir.path() / "data").string());
  const std::string spec = lm_job(data, dir.str(), 6, R"(, "log_every": 2)", "");
  local_cluster cluster({node_info{"n1", {{"CPU", 2}}}});
  const auto id = cluster.submit(spec);
  const auto last = cluster.follow(id, 120s);
  REQUIRE(last.state == job_state::succeeded);
  CHECK(last.step == 6);

  const auto lines = cohort::test::read_json_lines(dir.path() / "lm" / "metrics.jsonl");
  REQUIRE(lines.size() == 3);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    CHECK(lines[i]["step"] == 2 * (i + 1));
    CHECK(lines[i]["tokens_per_s"].get<double>() > 0);
    CHECK(lines[i]["grad_norm"].get<double>() > 0);
  }
  CHECK(lines[0]["loss"].get<double>() > lines[2]["loss"].get<double>());
}

TEST_CASE("with run.checkpoint.export_every the checkpoint of every such step but the final one is "
          "also a Hugging Face directory with its metrics, equal to cohort-ckpt's export of it, and "
          "only the newest num_exports_to_keep stay",
          "[actors]") {
  cohort::test::temp_dir dir;
  const auto data = cohort::test::make_tiny_dataset((dir.path() / "data").string());
  const std::string spec = lm_job(data, dir.str(), 8, "",
                                  R"(, "checkpoint": {"every_steps": 2, "export_every": 2, "num_exports_to_keep": 2})");
  local_cluster cluster({node_info{"n1", {{"CPU", 2}}}});
  const auto id = cluster.submit(spec);
  REQUIRE(cluster.follow(id, 120s).state == job_state::succeeded);
  const auto exports = dir.path() / "lm" / "exports";
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(exports)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  // Steps 2, 4 and 6 were exported (8 is the final model, lm/model); the newest two stay.
  CHECK(names == std::vector<std::string>{"step-00000004", "step-00000006"});
  CHECK(std::filesystem::exists(dir.path() / "lm" / "model" / "config.json"));
  const auto step6 = exports / "step-00000006";
  const auto state = nlohmann::json::parse(cohort::test::read_file(step6 / "trainer_state.json"));
  CHECK(state["global_step"] == 6);
  const auto checkpoint = dir.path() / "lm" / "checkpoints" / "step-00000006";
  CHECK(state["log_history"][0]["loss"] == cohort::core::ckpt::read_manifest(checkpoint.string()).metrics["loss"]);
  // The same bytes as an export of the committed checkpoint made afterwards.
  const auto again = dir.path() / "again";
  cohort::core::ckpt::export_hf(checkpoint.string(), again.string());
  for (const char* file : {"config.json", "model.safetensors"}) {
    INFO(file);
    CHECK(cohort::test::read_file(step6 / file) == cohort::test::read_file(again / file));
  }
}
