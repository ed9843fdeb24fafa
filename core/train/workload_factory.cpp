// make_workload: the workload a job's spec asks for.
#include <stdexcept>

#include "core/train/causal_lm_workload.hpp"
#include "core/train/linear_regression_workload.hpp"
#include "core/train/workload.hpp"

namespace cohort::core::train {

std::unique_ptr<workload> make_workload(const config::job_spec& spec) {
  switch (spec.workload) {
    case config::workload_kind::linear_regression:
      return std::make_unique<linear_regression_workload>();
    case config::workload_kind::causal_lm:
    case config::workload_kind::reward_model:  // the same run, the engine trains a score head
      return std::make_unique<causal_lm_workload>();
  }
  throw std::invalid_argument("unknown workload kind " +
                              std::to_string(static_cast<int>(spec.workload)));
}

}  // namespace cohort::core::train
