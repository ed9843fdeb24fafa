// Tests of how `submit plan` shows a plan: the table people read and the JSON machines read.
#include <catch2/catch.hpp>

#include <sstream>

#include "tools/plan_output.hpp"

using cohort::actors::memory_plan;
using cohort::core::resources::placement;

namespace {

placement three_ranks() {
  placement p;
  p.trainer_node = "big";
  p.rank_nodes = {"big", "small", "big"};
  return p;
}

memory_plan gpu_memory() {
  memory_plan m;
  m.known = true;
  m.parameters = 1000;
  m.setting = "ZeRO-3, bf16, no offload";
  m.device_bytes = 2.0 * 1024 * 1024 * 1024;
  m.host_bytes = 3.0 * 1024 * 1024;
  m.steady_host_bytes = 3.0 * 1024 * 1024;
  m.load_peak_host_bytes = 1.0 * 1024 * 1024;
  m.items = {{"fp32 master shard", 1024.0 * 1024, "gpu"}, {"checkpoint host copy", 3.0 * 1024 * 1024, "host"}};
  m.cuda_context_bytes = 1024.0 * 1024 * 1024;
  m.rank0_extra_host_bytes = 1024.0 * 1024;
  return m;
}

}  // namespace

TEST_CASE("the plan table lists each node with its ranks and each rank with its memory", "[tools]") {
  std::ostringstream out;
  cohort::tools::print_plan(out, "job-a", three_ranks(), gpu_memory());
  const auto text = out.str();
  INFO(text);
  CHECK_THAT(text, Catch::StartsWith("job job-a: 3 ranks on 2 nodes, trainer on big\n"));
  CHECK_THAT(text, Catch::Contains("  NODE   RANKS\n  big    0,2\n  small  1\n"));
  CHECK_THAT(text, Catch::Contains("  RANK  NODE   GPU MEMORY  HOST RAM\n"
                                   "  0     big    2.0 GiB     4.0 MiB\n"
                                   "  1     small  2.0 GiB     3.0 MiB\n"));
  CHECK_THAT(text, Catch::Contains("memory per rank (ZeRO-3, bf16, no offload, 1000 parameters):"));
  CHECK_THAT(text, Catch::Contains("  fp32 master shard     1.0 MiB  gpu\n"));
}

TEST_CASE("a CPU job's plan shows no GPU memory, and a job without a model shows ranks only", "[tools]") {
  auto cpu = gpu_memory();
  cpu.device_bytes = 0;
  std::ostringstream with_memory;
  cohort::tools::print_plan(with_memory, "cpu", three_ranks(), cpu);
  CHECK_THAT(with_memory.str(), Catch::Contains("  1     small  -           3.0 MiB\n"));

  std::ostringstream without;
  cohort::tools::print_plan(without, "lr", three_ranks(), memory_plan{});
  INFO(without.str());
  CHECK_THAT(without.str(), Catch::Contains("  RANK  NODE\n  0     big\n  1     small\n  2     big\n"));
  CHECK_THAT(without.str(), !Catch::Contains("memory per rank"));
}

TEST_CASE("the plan JSON keeps the placement and adds rank 0's export buffer to its host RAM", "[tools]") {
  const auto json = cohort::tools::plan_json(three_ranks(), gpu_memory());
  CHECK(json["trainer"] == "big");
  CHECK(json["ranks"] == nlohmann::json::array({"big", "small", "big"}));
  REQUIRE(json["memory"]["ranks"].size() == 3);
  CHECK(json["memory"]["ranks"][0]["host_bytes"] == 4.0 * 1024 * 1024);
  CHECK(json["memory"]["ranks"][1]["host_bytes"] == 3.0 * 1024 * 1024);
  CHECK(json["memory"]["per_rank"]["items"][1]["where"] == "host");
  CHECK_FALSE(cohort::tools::plan_json(three_ranks(), memory_plan{}).contains("memory"));
}

TEST_CASE("the plan shows DeepSpeed's rule of thumb for offloaded host RAM beside its own figure", "[tools]") {
  auto m = gpu_memory();
  m.parameters = 3 * 1024 * 1024;  // 18 bytes each over 3 ranks: 18 MiB per rank
  std::ostringstream out;
  cohort::tools::print_plan(out, "job-a", three_ranks(), m);
  INFO(out.str());
  CHECK_THAT(out.str(), Catch::Contains("DeepSpeed's rule of thumb for ZeRO-3 with CPU offload (18 bytes x 3145728 "
                                        "parameters / 3 ranks): host 18.0 MiB per rank"));
  CHECK(cohort::tools::plan_json(three_ranks(), m)["memory"]["deepspeed_offload_rule_host_bytes"] ==
        18.0 * 1024 * 1024);
}
