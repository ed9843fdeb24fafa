// A small real data-parallel job: least-squares fit of a linear model on synthetic data, with
// gradients averaged across the group through the collective layer (Gloo on CPU). The quick start
// and the actor/cluster tests run it; its final loss tells whether the group really cooperated.
#pragma once

#include "core/train/workload.hpp"

namespace cohort::core::train {

class linear_regression_workload final : public workload {
 public:
  void run(const worker_context& ctx) override;
};

}  // namespace cohort::core::train
