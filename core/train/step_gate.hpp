// The step gate of run.hold_before_step and run.hold_before_steps: every rank of an attempt stops
// before each such step and waits until the job is released (the n-th hold an attempt reaches
// waits for that attempt's n-th release). `submit release JOB` reaches the head, which asks the
// attempt's trainer to send a release to every worker process (worker_command); its command link
// counts it in worker_context::signals (run_signals::releases), which each held rank watches (no
// collective runs while held, so no collective timeout can fire). Rank 0 reports the hold through
// ctx.report (step_report::held_before_step) so `submit status` shows it, and again once
// released. A release that arrives before the gate is reached lets the attempt pass it; a
// restarted attempt holds again (its count is its own). Stopping the job ends a held attempt as
// any other. One per rank per attempt, used by the rank's thread.
#pragma once

#include <cstdint>
#include <string>

#include "core/train/workload.hpp"

namespace cohort::core::train {

class step_gate {
 public:
  explicit step_gate(const worker_context& ctx);
  step_gate(const step_gate&) = delete;
  step_gate& operator=(const step_gate&) = delete;

  // Called before running 1-based step `next_step`. At run.hold_before_step, blocks until the
  // attempt is released (throws cancelled_error when ctx.cancelled is set meanwhile; without
  // ctx.signals no release comes); rank 0 reports `last` (the newest step's report) with
  // held_before_step set, then again without. Returns true when it held.
  bool pass(std::int64_t next_step, const step_report& last);

 private:
  const worker_context& ctx_;
  std::int64_t holds_reached_ = 0;  // holds this attempt reached, this one included
};

}  // namespace cohort::core::train
