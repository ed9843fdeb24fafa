// step_gate: waits at run.hold_before_step for the attempt's n-th release (run_signals).
#include "core/train/step_gate.hpp"

#include <chrono>
#include <thread>

#include "core/train/run_control.hpp"

namespace cohort::core::train {

namespace {

// How often a held rank looks at its release count and the cancel flag (two atomic loads).
constexpr auto release_look_interval = std::chrono::milliseconds(20);

}  // namespace

step_gate::step_gate(const worker_context& ctx) : ctx_(ctx) {}

bool step_gate::pass(std::int64_t next_step, const step_report& last) {
  if (!config::holds_before(ctx_.spec.run, next_step)) return false;
  const std::int64_t release_needed = ++holds_reached_;
  step_report held = last;
  held.step = next_step - 1;
  held.held_before_step = next_step;
  if (ctx_.rank == 0) {
    if (ctx_.log)
      ctx_.log("held before step " + std::to_string(next_step) + " (run.hold_before_step) in attempt " +
               std::to_string(ctx_.attempt + 1) + "; `submit release " + ctx_.job_id + "` lets it go on");
    if (ctx_.report) ctx_.report(held);
  }
  // The attempt's n-th hold waits for its n-th release.
  while (ctx_.signals == nullptr || ctx_.signals->releases.load() < release_needed) {
    check_cancelled(ctx_.cancelled);
    std::this_thread::sleep_for(release_look_interval);
  }
  if (ctx_.rank == 0) {
    if (ctx_.log) ctx_.log("released: running step " + std::to_string(next_step));
    held.held_before_step = 0;
    if (ctx_.report) ctx_.report(held);
  }
  return true;
}

}  // namespace cohort::core::train
