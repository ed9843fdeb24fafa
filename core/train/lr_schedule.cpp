// learning_rate: warmup, then the decay the spec names.
#include "core/train/lr_schedule.hpp"

#include <algorithm>
#include <cmath>

namespace cohort::core::train {

double learning_rate(const config::train_spec& train, std::int64_t step, std::int64_t total_steps) {
  const std::int64_t warmup = train.warmup_steps;
  if (step < warmup) return train.lr * static_cast<double>(step) / static_cast<double>(warmup);
  if (train.schedule == config::lr_schedule::constant) return train.lr;
  const double progress = static_cast<double>(step - warmup) /
                          static_cast<double>(std::max<std::int64_t>(1, total_steps - warmup));
  const double clamped = std::clamp(progress, 0.0, 1.0);
  const double decay = train.schedule == config::lr_schedule::cosine
                           ? 0.5 * (1.0 + std::cos(M_PI * clamped))
                           : 1.0 - clamped;
  return train.lr * (train.min_lr_ratio + (1.0 - train.min_lr_ratio) * decay);
}

}  // namespace cohort::core::train
