// The learning rate at each step: linear warmup, then cosine or linear decay to
// min_lr_ratio × lr, or constant (the schedules of transformers' get_*_schedule_with_warmup).
#pragma once

#include <cstdint>

#include "config/job_spec.hpp"

namespace cohort::core::train {

// The learning rate for the update of 0-based step `step` of `total_steps`. During warmup it rises
// as lr × step / warmup_steps (0 at step 0, as transformers does).
double learning_rate(const config::train_spec& train, std::int64_t step, std::int64_t total_steps);

}  // namespace cohort::core::train
