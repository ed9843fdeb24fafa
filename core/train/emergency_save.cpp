// The emergency checkpoint against the preemption's deadline (see emergency_save.hpp).
#include "core/train/emergency_save.hpp"

#include <cstdio>

namespace cohort::core::train {

namespace {

std::string seconds(double s) {
  char out[32];
  std::snprintf(out, sizeof out, "%.1f s", s);
  return out;
}

std::string mib(std::uint64_t bytes) {
  char out[32];
  std::snprintf(out, sizeof out, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return out;
}

}  // namespace

emergency_save_plan plan_emergency_save(const std::optional<save_record>& last, double step_seconds,
                                        std::int64_t deadline_ms, std::int64_t now_ms,
                                        std::int64_t kept_step) {
  if (deadline_ms <= 0) return {};
  const double left = static_cast<double>(deadline_ms - now_ms) / 1000;
  if (!last)
    return {true, "saving an emergency checkpoint with " + seconds(left) +
                      " left before the deadline (no save of this job was timed yet to estimate from)"};
  const double estimate = step_seconds + last->seconds;
  const std::string numbers = "about " + seconds(estimate) + " (a step of " + seconds(step_seconds) +
                              ", then the last save's " + seconds(last->seconds) + " for " +
                              mib(last->bytes) + " on rank " + std::to_string(last->rank) + ")";
  if (estimate <= left - emergency_save_margin_s)
    return {true, "saving an emergency checkpoint: " + numbers + ", " + seconds(left) +
                      " left before the deadline"};
  return {false, "no emergency checkpoint: it would take " + numbers + ", but " + seconds(left) +
                     " are left before the deadline (less a " + seconds(emergency_save_margin_s) +
                     " margin); the job keeps " +
                     (kept_step > 0 ? "checkpoint step " + std::to_string(kept_step)
                                    : std::string("no checkpoint"))};
}

}  // namespace cohort::core::train
