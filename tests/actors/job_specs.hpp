// Job specs for the actor tests: the linear-regression workload with a given shape.
#pragma once

#include <string>

namespace cohort::test {

struct lr_job_options {
  std::string name = "lr";
  int workers = 2;
  int max_failures = 0;
  int max_preemptions = -1;  // run.failure.max_preemptions
  int steps = 40;
  double step_delay_s = 0.0;
  int hold_before_step = 0;  // run.hold_before_step (0: none)
  std::string strategy = "PACK";
  std::string trainer_resources = "{}";
  std::string storage_path;
};

inline std::string linear_regression_job(const lr_job_options& o) {
  return R"({"name": ")" + o.name + R"(", "workload": "linear_regression",
    "scaling": {"num_workers": )" + std::to_string(o.workers) +
         R"(, "resources_per_worker": {"CPU": 1}, "placement_strategy": ")" + o.strategy +
         R"(", "trainer_resources": )" + o.trainer_resources + R"(},
    "train": {"micro_batch_size": 16, "grad_accum": 1, "max_steps": )" + std::to_string(o.steps) +
         R"(, "lr": 0.1, "seed": 7, "step_delay_s": )" + std::to_string(o.step_delay_s) + R"(},
    "run": {)" + (o.storage_path.empty() ? "" : R"("storage_path": ")" + o.storage_path + R"(", )") +
         R"("hold_before_step": )" + std::to_string(o.hold_before_step) +
         R"(, "failure": {"max_failures": )" + std::to_string(o.max_failures) +
         R"(, "max_preemptions": )" + std::to_string(o.max_preemptions) + "}}}";
}

}  // namespace cohort::test
