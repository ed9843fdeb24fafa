// The step gate of run.hold_before_step and run.hold_before_steps: every rank of an attempt stops
// before each such step and waits until the job is released (the n-th hold an attempt reaches
// waits for that attempt's n-th release). `submit release JOB` reaches the head, which asks the
// attempt's trainer to set hold_release_key in the attempt's rendezvous store; each rank polls
// that key (no collective runs while held, so no collective timeout can fire). Rank 0 reports the
// hold through ctx.report (step_report::held_before_step) so `submit status` shows it, and again
// once released. A release that arrives before the gate is reached lets the attempt pass it; a
// restarted attempt holds again (its key is its own). Stopping the job ends a held attempt as
// any other. One per rank per attempt, used by the rank's thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/train/workload.hpp"

namespace cohort::core::comm {
class store;
}

namespace cohort::core::train {

// The store key that releases attempt (a counter: each release adds 1) `attempt` of `job_id` from its hold. Inline, so actors/
// (the trainer sets it) needs no link to core/train.
inline std::string hold_release_key(const std::string& job_id, std::int32_t attempt) {
  return job_id + "/attempt-" + std::to_string(attempt) + "/hold/release";
}

class step_gate {
 public:
  // Connects to the attempt's store (ctx.store_address) only when the spec has a hold.
  explicit step_gate(const worker_context& ctx);
  ~step_gate();
  step_gate(const step_gate&) = delete;
  step_gate& operator=(const step_gate&) = delete;

  // Called before running 1-based step `next_step`. At run.hold_before_step, blocks until the
  // attempt is released (throws cancelled_error when ctx.cancelled is set meanwhile); rank 0
  // reports `last` (the newest step's report) with held_before_step set, then again without.
  // Returns true when it held.
  bool pass(std::int64_t next_step, const step_report& last);

 private:
  const worker_context& ctx_;
  std::unique_ptr<comm::store> store_;
  std::int64_t holds_reached_ = 0;  // holds this attempt reached, this one included
};

}  // namespace cohort::core::train
