// step_gate: waits at run.hold_before_step for the attempt's release key.
#include "core/train/step_gate.hpp"

#include <chrono>
#include <thread>

#include "core/comm/tcp_store.hpp"
#include "core/train/run_control.hpp"

namespace cohort::core::train {

namespace {

constexpr auto release_poll_interval = std::chrono::milliseconds(20);

}  // namespace

step_gate::step_gate(const worker_context& ctx) : ctx_(ctx) {
  if (!config::has_holds(ctx.spec.run)) return;
  const auto address = comm::parse_host_port(ctx.store_address);
  store_ = std::make_unique<comm::tcp_store>(address.host, address.port, ctx.store_secret);
}

step_gate::~step_gate() = default;

bool step_gate::pass(std::int64_t next_step, const step_report& last) {
  if (!config::holds_before(ctx_.spec.run, next_step)) return false;
  const std::int64_t release_needed = ++holds_reached_;
  const std::string key = hold_release_key(ctx_.job_id, ctx_.attempt);
  step_report held = last;
  held.step = next_step - 1;
  held.held_before_step = next_step;
  if (ctx_.rank == 0) {
    if (ctx_.log)
      ctx_.log("held before step " + std::to_string(next_step) + " (run.hold_before_step) in attempt " +
               std::to_string(ctx_.attempt + 1) + "; `submit release " + ctx_.job_id + "` lets it go on");
    if (ctx_.report) ctx_.report(held);
  }
  // The trainer counts releases in the key (store add): the attempt's n-th hold waits for its
  // n-th release.
  while (store_->add(key, 0) < release_needed) {
    check_cancelled(ctx_.cancelled);
    std::this_thread::sleep_for(release_poll_interval);
  }
  if (ctx_.rank == 0) {
    if (ctx_.log) ctx_.log("released: running step " + std::to_string(next_step));
    held.held_before_step = 0;
    if (ctx_.report) ctx_.report(held);
  }
  return true;
}

}  // namespace cohort::core::train
