// The node actor: one per cluster-worker (or per embedded node). It introduces itself to the
// head, starts trainers and workers linked to itself (a node that dies takes them with it), and
// keeps the list of its live trainers and workers for the embedded cluster's failure drills
// (in-process messages only, drill_messages.hpp: no peer on the wire can send one). Told to
// drain (begin_drain: its cluster-worker got SIGTERM or a cloud's preemption notice), it tells
// the head it leaves (node_draining) and quits once its trainers and workers are gone, or after
// the longest run.failure.preemption_grace_s of its jobs (or the notice's deadline, if sooner)
// plus drain_margin.
// Head commands of an epoch older than the newest leader it has seen are refused (epoch_fence.hpp).
#include <caf/all.hpp>

#include <filesystem>
#include <iostream>

#include "actors/node_actor.hpp"
#include "actors/trainer_actor.hpp"
#include "config/job_spec.hpp"
#include "core/ckpt/replica.hpp"
#include "core/proc/line_output.hpp"

namespace cohort::actors {

namespace {

using node_ptr = caf::stateful_actor<node_actor_state>*;

// The node leaves: the head is told, and the node ends once its children have (or at the longest
// preemption grace of its jobs, or the notice's deadline when that comes first, plus a margin).
// The head says a job ended for good: the peer replicas its ranks kept on this node (tmpfs, host
// memory) go, as its workers would have named them.
void drop_job_replicas(const std::string& node, const job_ended& m) {
  const auto dir = core::ckpt::replica_dir(core::ckpt::replica_root(), node, m.job_id,
                                           config::local_run_dir(m.name, m.storage_path, m.local_dir));
  std::error_code ec;
  if (std::filesystem::remove_all(dir, ec) > 0)
    core::proc::say_whole_line(
        std::cerr, "cluster-worker: job " + m.job_id + " ended: removed its peer replicas " + dir);
}

void on_begin_drain(node_ptr self, const begin_drain& req) {
  auto& st = self->state;
  std::optional<std::chrono::milliseconds> until_deadline;
  if (req.deadline)
    until_deadline = std::chrono::duration_cast<std::chrono::milliseconds>(*req.deadline -
                                                                           std::chrono::system_clock::now());
  const auto plan = st.children.begin_drain(until_deadline);
  if (!plan) return;  // draining already
  const auto deadline_ms =
      req.deadline
          ? std::chrono::duration_cast<std::chrono::milliseconds>(req.deadline->time_since_epoch()).count()
          : std::int64_t{0};
  self->send(st.head, node_draining{st.info.name, req.reason, deadline_ms});
  if (plan->quit_now) {
    self->quit();
    return;
  }
  self->delayed_send(self, plan->wait, drain_deadline{});
}

// A head command of an older epoch than the node has seen is refused and logged.
void on_start_trainer(node_ptr self, const start_trainer& req) {
  auto& st = self->state;
  if (auto refused = st.fence->refuse(req.epoch, "start_trainer of job " + req.setup.job_id + " attempt " +
                                                     std::to_string(req.setup.attempt + 1))) {
    core::proc::say_whole_line(std::cerr, "node " + st.info.name + ": " + *refused);
    self->send(st.head, log_line{req.setup.job_id, -1, st.info.name, 0, "node: " + *refused});
    return;
  }
  auto trainer =
      self->spawn<caf::linked>(trainer_actor, req.setup, st.head, st.directory, st.info.address, st.fence);
  st.children.add_trainer(trainer.address(), req.setup.job_id, trainer,
                          req.setup.spec.run.failure.preemption_grace_s);
}

void on_start_worker(node_ptr self, start_worker req) {
  auto& st = self->state;
  auto trainer = caf::actor_cast<caf::actor>(self->current_sender());
  req.setup.node = st.info.name;
  req.setup.node_address = st.info.address;
  auto worker = st.spawn_worker(self, req.setup, trainer);
  self->monitor(worker);
  st.children.add_worker(worker.address(), req.setup.job_id, req.setup.rank, worker,
                         req.setup.spec.run.failure.preemption_grace_s);
}

// A (new) leader welcomed this node: it says hello again, and so do its trainers.
void on_reintroduce(node_ptr self, reintroduce r) {
  auto& st = self->state;
  st.fence->observe(r.epoch);
  self->send(st.head, node_hello{st.info});
  for (const auto& trainer : st.children.trainers()) self->send(trainer, reintroduce{});
}

bool on_kill_trainer_drill(node_ptr self, const kill_trainer_drill& req) {
  auto trainer = self->state.children.take_trainer(req.job_id);
  if (!trainer) return false;
  self->send_exit(*trainer, caf::exit_reason::kill);
  return true;
}

bool on_kill_worker_drill(node_ptr self, const kill_worker_drill& req) {
  auto worker = self->state.children.worker(req.job_id, req.rank);
  if (!worker) return false;
  self->send_exit(*worker, caf::exit_reason::kill);
  return true;
}

}  // namespace

caf::behavior node_actor(caf::stateful_actor<node_actor_state>* self, node_info info,
                         caf::actor head, std::shared_ptr<node_directory> directory,
                         worker_spawner spawn_worker, std::shared_ptr<epoch_fence> fence) {
  auto& st = self->state;
  st.fence = fence ? std::move(fence) : std::make_shared<epoch_fence>();
  st.info = info;
  st.head = head;
  st.directory = std::move(directory);
  st.spawn_worker = std::move(spawn_worker);
  // Children are linked so that this node's death ends them; their own exits must not end us,
  // any other exit request does.
  self->set_exit_handler([=](caf::exit_msg& msg) {
    using verdict = node_children<caf::actor, caf::actor_addr>::exit_verdict;
    switch (self->state.children.on_exit(msg.source)) {
      case verdict::not_a_child:
        self->quit(msg.reason);
        break;
      case verdict::quit:
        self->quit();
        break;
      case verdict::stay:
        break;
    }
  });
  self->set_down_handler([=](caf::down_msg& msg) { self->state.children.on_down(msg.source); });
  self->send(head, node_hello{info});
  return {
      [=](const job_ended& m) { drop_job_replicas(self->state.info.name, m); },
      [=](const begin_drain& req) { on_begin_drain(self, req); },
      [=](drain_deadline) { self->quit(); },
      [=](const start_trainer& req) { on_start_trainer(self, req); },
      [=](start_worker req) { on_start_worker(self, std::move(req)); },
      [=](node_ping) { return true; },
      [=](reintroduce r) { on_reintroduce(self, r); },
      [=](const kill_trainer_drill& req) { return on_kill_trainer_drill(self, req); },
      [=](const kill_worker_drill& req) { return on_kill_worker_drill(self, req); },
  };
}

}  // namespace cohort::actors
