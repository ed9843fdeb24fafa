// metrics.jsonl writer (see metrics_log.hpp).
#include "core/train/metrics_log.hpp"

#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

namespace cohort::core::train {

metrics_log::metrics_log(const std::string& path, std::int64_t resume_step) : path_(path) {
  namespace fs = std::filesystem;
  auto dir = fs::path(path).parent_path();
  if (!dir.empty()) fs::create_directories(dir);
  std::vector<std::string> kept;
  if (resume_step > 0) {
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.contains("step") && j["step"].is_number_integer() &&
          j["step"].get<std::int64_t>() <= resume_step)
        kept.push_back(line);
    }
  }
  out_.open(path, std::ios::trunc);
  if (!out_) throw std::runtime_error("cannot write metrics file " + path);
  for (const auto& line : kept) out_ << line << '\n';
  out_.flush();
}

void add_reward_metrics(nlohmann::json& j, const step_report& r) {
  const auto add = [&](const std::string& prefix, const reward_metrics& m) {
    j[prefix + "accuracy"] = m.accuracy;
    j[prefix + "chosen_mean"] = m.chosen_mean;
    j[prefix + "rejected_mean"] = m.rejected_mean;
  };
  if (r.reward) add("", *r.reward);
  if (r.evaluated && r.eval_reward) add("eval_", *r.eval_reward);
}

void metrics_log::append(const step_report& r) {
  nlohmann::json j{{"step", r.step},           {"loss", r.loss},
                   {"lr", r.lr},               {"grad_norm", r.grad_norm},
                   {"tokens_per_s", r.tokens_per_s}, {"total_steps", r.total_steps}};
  if (r.mfu > 0) j["mfu"] = r.mfu;
  if (r.evaluated) {
    j["eval_loss"] = r.eval_loss;
    if (!r.eval_reward) j["eval_perplexity"] = r.eval_perplexity;
  }
  add_reward_metrics(j, r);
  // When the line is written, in seconds since the Unix epoch: the lines' spacing is the run's
  // wall time per step, the run loop's own work between steps included (step_s is the step's).
  j["time"] = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (r.step_seconds > 0) {
    j["step_s"] = r.step_seconds;
    j["optimizer_s"] = r.optimizer_seconds;
    if (r.host_update_seconds > 0) j["host_update_s"] = r.host_update_seconds;
  }
  out_ << j.dump() << '\n';
  out_.flush();
}

}  // namespace cohort::core::train
