// A causal_lm job run through the embedded cluster as a user submits it: two workers train a
// tiny Llama on a tiny data set and rank 0's metrics.jsonl has every logged step.
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "actors/local_cluster.hpp"
#include "tests/core/train/tiny_data.hpp"
#include "tests/support/json_lines.hpp"
#include "tests/support/temp_dir.hpp"

using namespace cohort::actors;
using namespace std::chrono_literals;

TEST_CASE("a causal_lm job on two workers trains a tiny Llama and logs every second step",
          "[actors]") {
  cohort::test::temp_dir dir;
  const auto data = cohort::test::make_tiny_dataset((dir.path() / "data").string());
  const std::string spec = R"({"name": "lm", "workload": "causal_lm",
    "model": {"config": )" + cohort::test::tiny_llama_config() + R"(, "init_seed": 7},
    "data": {"train": ")" + data + R"("},
    "scaling": {"num_workers": 2, "resources_per_worker": {"CPU": 1}},
    "train": {"seq_len": 16, "micro_batch_size": 2, "grad_accum": 2, "max_steps": 6, "lr": 0.01,
              "log_every": 2},
    "zero": {"stage": 2},
    "run": {"storage_path": ")" + dir.str() + R"("}})";
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
