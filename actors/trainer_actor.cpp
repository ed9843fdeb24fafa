// The trainer actor: drives one attempt of one job. It starts the worker group through the
// nodes, forwards rank 0's progress to the head, and ends the attempt at the first failure
// (stopping the other workers) or when every rank has finished.
#include <caf/all.hpp>

#include "actors/actor_system_types.hpp"

namespace cohort::actors {

namespace {

using trainer_ptr = caf::stateful_actor<trainer_actor_state>*;

void settle(trainer_ptr self, bool succeeded, failure_cause cause) {
  auto& st = self->state;
  if (st.settled) return;
  st.settled = true;
  for (auto& w : st.workers)
    if (w) self->send_exit(w, caf::exit_reason::kill);
  cause.attempt = st.setup.attempt;
  self->send(st.head, outcome_atom::value,
             attempt_outcome{st.setup.job_id, st.setup.attempt, succeeded, cause});
  self->quit();
}

void fail_rank(trainer_ptr self, std::int32_t rank, const std::string& reason) {
  const auto& nodes = self->state.setup.rank_nodes;
  std::string node = rank >= 0 && rank < static_cast<std::int32_t>(nodes.size()) ? nodes[rank] : "";
  settle(self, false, failure_cause{0, rank, node, reason});
}

}  // namespace

caf::behavior trainer_actor(trainer_ptr self, trainer_setup setup,
                            std::vector<caf::actor> rank_nodes, caf::actor head) {
  auto& st = self->state;
  st.setup = setup;
  st.rank_nodes = rank_nodes;
  st.head = head;
  const auto world = static_cast<std::int32_t>(rank_nodes.size());
  st.workers.resize(world);
  st.store = std::make_unique<core::comm::tcp_store_server>("127.0.0.1", 0);
  const auto store_address = st.store->host() + ":" + std::to_string(st.store->port());

  self->set_down_handler([=](caf::down_msg& msg) {
    auto it = self->state.rank_of.find(msg.source);
    if (it == self->state.rank_of.end()) return;
    auto rank = it->second;
    if (self->state.done.count(rank) != 0 && !msg.reason) return;
    fail_rank(self, rank,
              msg.reason ? describe(self->system(), msg.reason)
                         : std::string("exited before finishing"));
  });

  for (std::int32_t rank = 0; rank < world; ++rank) {
    worker_setup ws{setup.job_id, setup.spec_json, rank, world, setup.attempt,
                    setup.rank_nodes[rank], store_address};
    self->request(rank_nodes[rank], caf::infinite, spawn_worker_atom::value, ws,
                  caf::actor_cast<caf::actor>(self))
        .then(
            [=](caf::actor& worker) {
              auto& st = self->state;
              if (st.settled) {
                self->send_exit(worker, caf::exit_reason::kill);
                return;
              }
              self->monitor(worker);
              st.workers[rank] = worker;
              st.rank_of[worker.address()] = rank;
              if (++st.spawned == world)
                self->send(st.head, running_atom::value, st.setup.job_id, st.setup.attempt);
            },
            [=](caf::error& err) {
              fail_rank(self, rank, "could not start the worker: " + describe(self->system(), err));
            });
  }

  return {
      [=](progress_atom, const progress_report& report) {
        if (report.rank == 0) self->send(self->state.head, progress_atom::value, report);
      },
      [=](log_atom, const log_line& line) { self->send(self->state.head, log_atom::value, line); },
      [=](done_atom, std::int32_t rank) {
        auto& st = self->state;
        st.done.insert(rank);
        if (static_cast<std::int32_t>(st.done.size()) == world) settle(self, true, {});
      },
      [=](failed_atom, std::int32_t rank, const std::string& reason) {
        fail_rank(self, rank, reason);
      },
  };
}

}  // namespace cohort::actors
