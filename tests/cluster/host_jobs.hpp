// The job the tests across hosts run: a tiny Llama, ZeRO-3 on 2 CPU ranks, one per node (SPREAD),
// so that its collectives cross hosts over Gloo.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "tests/core/train/tiny_data.hpp"

namespace cohort::test {

// `steps` steps of the job named `name` on the data set `data`, its runs under `storage`; the
// caller adds its failure policy, checkpoints and holds under "run".
inline nlohmann::json spread_zero3_job(const std::string& name, const std::string& data, const std::string& storage,
                                       int steps) {
  auto spec = nlohmann::json::parse(R"({"workload": "causal_lm",
    "scaling": {"num_workers": 2, "resources_per_worker": {"CPU": 1}, "placement_strategy": "SPREAD"},
    "train": {"seq_len": 16, "micro_batch_size": 2, "grad_accum": 1, "lr": 0.01, "seed": 3},
    "zero": {"stage": 3}})");
  spec["name"] = name;
  spec["model"] = {{"config", nlohmann::json::parse(tiny_llama_config())}, {"init_seed", 7}};
  spec["data"] = {{"train", data}};
  spec["train"]["max_steps"] = steps;
  spec["run"] = {{"storage_path", storage}};
  return spec;
}

}  // namespace cohort::test
