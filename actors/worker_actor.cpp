// The worker actor: one rank of a job. It runs the workload on a runner thread, turns the
// thread's reports into messages to its trainer, and stops the workload when the trainer goes.
#include <unistd.h>

#include <caf/all.hpp>

#include "actors/actor_system_types.hpp"
#include "config/job_spec.hpp"

namespace cohort::actors {

caf::behavior worker_actor(caf::stateful_actor<worker_actor_state>* self, worker_setup setup,
                           caf::actor trainer, std::shared_ptr<runner_registry> runners) {
  self->state.setup = setup;
  self->state.trainer = trainer;
  self->monitor(trainer);
  self->set_down_handler([=](caf::down_msg& msg) {
    if (msg.source == self->state.trainer.address()) self->quit(caf::exit_reason::user_shutdown);
  });

  core::train::worker_context ctx;
  ctx.spec = config::parse_job_spec(setup.spec_json);
  ctx.job_id = setup.job_id;
  ctx.rank = setup.rank;
  ctx.world_size = setup.world_size;
  ctx.attempt = setup.attempt;
  ctx.node = setup.node;
  ctx.store_address = setup.store_address;
  ctx.run_dir = ctx.spec.run.storage_path + "/" + ctx.spec.name;

  // The runner thread talks to this actor only through messages.
  auto me = caf::actor_cast<caf::actor>(self);
  workload_runner::callbacks cb;
  cb.on_report = [me, setup](const core::train::step_report& r) {
    caf::anon_send(me, progress_atom::value,
                   progress_report{setup.job_id, setup.rank, r.step, r.total_steps, r.loss, r.lr,
                                   r.grad_norm, r.tokens_per_s, r.mfu});
  };
  cb.on_log = [me, setup](const std::string& text) {
    caf::anon_send(me, log_atom::value,
                   log_line{setup.job_id, setup.rank, setup.node,
                            static_cast<std::int64_t>(::getpid()), text});
  };
  cb.on_done = [me] { caf::anon_send(me, done_atom::value); };
  cb.on_failed = [me](const std::string& reason) { caf::anon_send(me, failed_atom::value, reason); };
  self->state.runner = std::make_shared<workload_runner>(std::move(ctx), std::move(cb));
  runners->add(self->state.runner);

  return {
      [=](progress_atom, const progress_report& r) {
        self->send(self->state.trainer, progress_atom::value, r);
      },
      [=](log_atom, const log_line& line) { self->send(self->state.trainer, log_atom::value, line); },
      [=](done_atom) {
        self->send(self->state.trainer, done_atom::value, self->state.setup.rank);
        self->quit();
      },
      [=](failed_atom, const std::string& reason) {
        self->send(self->state.trainer, failed_atom::value, self->state.setup.rank, reason);
        self->quit(caf::make_error(caf::sec::runtime_error, reason));
      },
  };
}

}  // namespace cohort::actors
