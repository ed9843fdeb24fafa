// The in-process worker actor: one rank of a job, running its workload on a runner thread. It
// turns the thread's reports into messages to its trainer, hands the trainer's commands
// (worker_command) to the runner's signals, and stops the workload when the trainer goes or ends
// the attempt.
#include <unistd.h>

#include <caf/all.hpp>

#include "actors/worker_actor.hpp"
#include "actors/hang_detector.hpp"
#include "actors/worker_process_link.hpp"

namespace cohort::actors {

namespace {

// Messages from the runner thread to its actor.
struct runner_done {};
struct heartbeat_tick {};
struct runner_failed {
  std::string reason;
  failure_kind kind;
};

}  // namespace

}  // namespace cohort::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::runner_done)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::heartbeat_tick)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::runner_failed)

namespace cohort::actors {

caf::behavior worker_actor(caf::stateful_actor<worker_actor_state>* self, worker_setup setup,
                           caf::actor trainer, std::shared_ptr<runner_registry> runners) {
  self->state.setup = setup;
  self->state.trainer = trainer;
  self->monitor(trainer);
  self->set_down_handler([=](caf::down_msg& msg) {
    if (msg.source == self->state.trainer.address()) self->quit(caf::exit_reason::user_shutdown);
  });
  const auto pid = static_cast<std::int64_t>(::getpid());
  self->send(trainer, worker_started{setup.job_id, setup.attempt, setup.rank, pid});

  auto ctx = worker_context_for(setup);
  // In process, a rank heartbeats from this actor with the step its runner reached (the runner
  // thread shares the process with its peers', so its collective waits are not told apart).
  self->state.heartbeat_every = std::chrono::milliseconds(static_cast<std::int64_t>(
      heartbeat_interval_s(ctx.spec.run.failure.hang_timeout_s) * 1000));
  self->delayed_send(self, self->state.heartbeat_every, heartbeat_tick{});
  auto step = std::make_shared<std::atomic<std::int64_t>>(0);
  self->state.step = step;
  ctx.step_reached = step.get();  // kept alive by on_report below as long as the runner lives
  auto activity = std::make_shared<core::train::rank_activity>();
  self->state.activity = activity;
  ctx.activity = activity.get();

  // The runner thread reaches the trainer through this actor only.
  auto me = caf::actor_cast<caf::actor>(self);
  workload_runner::callbacks cb;
  cb.on_report = [me, setup, step, activity](const core::train::step_report& r) {
    caf::anon_send(me, stamped(setup, progress_of(r)));
  };
  cb.on_log = [me, setup, pid](const std::string& text) {
    caf::anon_send(me, log_line{setup.job_id, setup.rank, setup.node, pid, text});
  };
  cb.on_done = [me] { caf::anon_send(me, runner_done{}); };
  cb.on_failed = [me](const std::string& reason, failure_kind kind) {
    caf::anon_send(me, runner_failed{reason, kind});
  };
  self->state.runner = std::make_shared<workload_runner>(std::move(ctx), std::move(cb));
  runners->add(self->state.runner);

  auto finish = [=](bool ok, const std::string& reason, failure_kind kind) {
    const auto& s = self->state.setup;
    self->send(self->state.trainer, worker_finished{s.job_id, s.attempt, s.rank, ok, reason, kind});
    if (ok)
      self->quit();
    else
      self->quit(caf::make_error(caf::sec::runtime_error, reason));
  };
  return {
      [=](const progress_report& r) { self->send(self->state.trainer, r); },
      [=](const log_line& line) { self->send(self->state.trainer, line); },
      [=](runner_done) { finish(true, "", failure_kind::retryable); },
      [=](const runner_failed& f) { finish(false, f.reason, f.kind); },
      [=](const worker_command& c) {
        const auto& s = self->state.setup;
        if (c.job_id == s.job_id && c.attempt == s.attempt) self->state.runner->command(c);
      },
      [=](const stop_attempt&) { self->quit(caf::exit_reason::user_shutdown); },
      // A thread cannot be killed: the runner is cancelled as the actor ends (its state's dtor).
      [=](const kill_hung_worker&) { self->quit(caf::exit_reason::user_shutdown); },
      [=](heartbeat_tick) {
        const auto& s = self->state.setup;
        self->send(self->state.trainer,
                   rank_heartbeat{s.job_id, s.attempt, s.rank, self->state.step->load(), -1,
                                  heartbeat_of(self->state.activity->read())});
        self->delayed_send(self, self->state.heartbeat_every, heartbeat_tick{});
      },
  };
}

worker_spawner in_process_workers(std::shared_ptr<runner_registry> runners) {
  return [runners](caf::local_actor* node, const worker_setup& setup, const caf::actor& trainer) {
    return node->spawn<caf::linked>(worker_actor, setup, trainer, runners);
  };
}

}  // namespace cohort::actors
