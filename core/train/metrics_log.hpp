// metrics.jsonl of a run: one JSON object per logged step ({"step", "loss", "lr", "grad_norm",
// "tokens_per_s", "eval_loss" and
// "eval_perplexity" on evaluated steps, ...}). Opening it for a run that resumes at step k keeps the lines up to k and
// drops the rest, so a resumed run never shows a step twice. Rank 0 owns it; not thread-safe.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/train/workload.hpp"

namespace cohort::core::train {

// A reward model's figures of `r` into `j` (accuracy, chosen_mean, rejected_mean, and with an
// evaluation eval_accuracy, eval_chosen_mean, eval_rejected_mean); nothing for other workloads.
void add_reward_metrics(nlohmann::json& j, const step_report& r);

class metrics_log {
 public:
  // Creates the file's directory; keeps existing lines whose step <= resume_step.
  explicit metrics_log(const std::string& path, std::int64_t resume_step = 0);
  // Appends one line and flushes it (a crash loses no logged step).
  void append(const step_report& report);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace cohort::core::train
