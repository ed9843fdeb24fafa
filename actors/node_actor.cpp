// The node actor: one per cluster-worker (or per embedded node). It registers with the head,
// spawns trainers and workers linked to itself (a node that dies takes them with it), and keeps
// the list of its live workers.
#include <caf/all.hpp>

#include "actors/actor_system_types.hpp"

namespace cohort::actors {

caf::behavior node_actor(caf::stateful_actor<node_actor_state>* self, node_info info,
                         caf::actor head, std::shared_ptr<runner_registry> runners) {
  self->state.info = info;
  self->state.head = head;
  self->state.runners = std::move(runners);
  // Children are linked so that this node's death ends them; their own exits must not end us.
  self->set_exit_handler([=](caf::exit_msg& msg) {
    if (msg.source == self->state.head.address()) self->quit(msg.reason);
  });
  self->set_down_handler([=](caf::down_msg& msg) { self->state.workers.erase(msg.source); });
  self->send(head, register_atom::value, info);
  return {
      [=](spawn_trainer_atom, const trainer_setup& setup, const std::vector<caf::actor>& nodes) {
        return self->spawn<caf::linked>(trainer_actor, setup, nodes, self->state.head);
      },
      [=](spawn_worker_atom, worker_setup setup, const caf::actor& trainer) {
        setup.node = self->state.info.name;
        auto worker = self->spawn<caf::linked>(worker_actor, setup, trainer, self->state.runners);
        self->monitor(worker);
        self->state.workers[worker.address()] = {setup.job_id, setup.rank, worker};
        return worker;
      },
      [=](kill_worker_atom, const std::string& job_id, std::int32_t rank) {
        for (auto& [addr, w] : self->state.workers) {
          if (w.job_id == job_id && w.rank == rank) {
            self->send_exit(w.handle, caf::exit_reason::kill);
            return true;
          }
        }
        return false;
      },
  };
}

}  // namespace cohort::actors
