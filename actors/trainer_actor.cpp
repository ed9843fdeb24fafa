// The trainer actor: drives one attempt of one job. It serves the attempt's rendezvous store,
// starts the worker group through the nodes, forwards rank 0's progress to the head, and ends
// the attempt at the first failure (stopping the other workers) or when every rank has finished.
#include <caf/all.hpp>

#include "actors/actor_system_types.hpp"
#include "core/comm/store_auth.hpp"
#include "core/comm/tcp_store.hpp"
#include "core/train/checkpoint_request.hpp"
#include "core/train/step_gate.hpp"

namespace cohort::actors {

namespace {

using trainer_ptr = caf::stateful_actor<trainer_actor_state>*;

// The attempt's totals of refused and dropped store clients, as a line of the job's log.
void log_store_refusals(trainer_ptr self) {
  auto& st = self->state;
  if (st.store && st.store->refused_count() + st.store->dropped_count() > 0)
    self->send(st.head, log_line{st.setup.job_id, -1, st.setup.trainer_node, 0,
                                 "trainer: rendezvous store of attempt " + std::to_string(st.setup.attempt) +
                                     " refused " + std::to_string(st.store->refused_count()) +
                                     " unauthenticated clients and dropped " +
                                     std::to_string(st.store->dropped_count()) + " for bad frames"});
}

void settle(trainer_ptr self, bool succeeded, failure_cause cause) {
  auto& st = self->state;
  if (st.settled) return;
  st.settled = true;
  log_store_refusals(self);
  for (auto& w : st.workers)
    if (w) self->send(w, stop_attempt{st.setup.job_id, st.setup.attempt, "the attempt ended"});
  cause.attempt = st.setup.attempt;
  self->send(st.head, attempt_outcome{st.setup.job_id, st.setup.attempt, succeeded, cause});
  self->quit();
}

// Every refused or dropped store client becomes a line of the job's log; past ten, only every
// power of two, so a flood of connections cannot flood the log (the totals are in each line).
core::comm::tcp_store_server::refusal_callback report_refusals(caf::actor head, std::string job_id,
                                                                std::string node) {
  return [head, job_id, node](const core::comm::store_refusal& r) {
    const std::uint64_t n = r.refused + r.dropped;
    if (n > 10 && (n & (n - 1)) != 0) return;
    caf::anon_send(head, log_line{job_id, -1, node, 0,
                                  std::string("trainer: rendezvous store ") +
                                      (r.authenticated ? "dropped a client" : "refused a client") +
                                      " from " + r.peer + ": " + r.reason + " (" +
                                      std::to_string(r.refused) + " refused, " +
                                      std::to_string(r.dropped) + " dropped so far)"});
  };
}

void fail_rank(trainer_ptr self, std::int32_t rank, const std::string& reason,
               failure_kind kind = failure_kind::retryable) {
  const auto& nodes = self->state.setup.rank_nodes;
  std::string node = rank >= 0 && rank < static_cast<std::int32_t>(nodes.size()) ? nodes[rank] : "";
  settle(self, false, failure_cause{0, rank, node, reason, kind});
}

bool is_mine(trainer_ptr self, const std::string& job_id, std::int32_t attempt) {
  return job_id == self->state.setup.job_id && attempt == self->state.setup.attempt;
}

}  // namespace

caf::behavior trainer_actor(trainer_ptr self, trainer_setup setup, caf::actor head,
                            std::shared_ptr<node_directory> directory, std::string bind_address) {
  auto& st = self->state;
  st.setup = setup;
  st.head = head;
  // First of all, so the head supervises this attempt whatever happens next.
  self->send(head, trainer_started{setup.job_id, setup.attempt});
  const auto world = static_cast<std::int32_t>(setup.rank_nodes.size());
  st.workers.resize(world);

  self->set_down_handler([=](caf::down_msg& msg) {
    auto it = self->state.rank_of.find(msg.source);
    if (it == self->state.rank_of.end()) return;
    auto rank = it->second;
    if (self->state.done.count(rank) != 0) return;
    if (!msg.reason) {  // its last messages came first (the bridge keeps that order too)
      fail_rank(self, rank, "exited without reporting how its run ended");
      return;
    }
    fail_rank(self, rank, describe(self->system(), msg.reason));
  });

  std::string store_address;
  try {
    st.store_secret = core::comm::make_store_secret();
    st.store = std::make_unique<core::comm::tcp_store_server>(
        bind_address, 0, st.store_secret, report_refusals(head, setup.job_id, setup.trainer_node));
    store_address = st.store->host() + ":" + std::to_string(st.store->port());
  } catch (const std::exception& e) {
    settle(self, false, failure_cause{0, -1, setup.trainer_node,
                                      std::string("cannot serve the rendezvous store: ") + e.what()});
    return {};
  }
  for (std::int32_t rank = 0; rank < world && !st.settled; ++rank) {
    auto node = directory->find(setup.rank_nodes[rank]);
    if (!node) {
      fail_rank(self, rank, "node " + setup.rank_nodes[rank] + " is not reachable");
      return {};
    }
    const auto gpus = static_cast<std::size_t>(rank) < setup.rank_gpus.size()
                          ? setup.rank_gpus[static_cast<std::size_t>(rank)]
                          : std::vector<std::int32_t>{};
    self->send(node, start_worker{worker_setup{setup.job_id, setup.spec_json, rank, world,
                                               setup.attempt, setup.rank_nodes[rank],
                                               store_address, "", gpus,
                                               core::comm::store_secret_to_hex(st.store_secret)}});
  }

  return {
      [=](const worker_started& ws) {
        auto& st = self->state;
        if (!is_mine(self, ws.job_id, ws.attempt) || ws.rank < 0 || ws.rank >= world) return;
        auto worker = caf::actor_cast<caf::actor>(self->current_sender());
        self->monitor(worker);
        st.workers[ws.rank] = worker;
        st.rank_of[worker.address()] = ws.rank;
        if (++st.started == world)
          self->send(st.head, attempt_running{st.setup.job_id, st.setup.attempt});
      },
      [=](const progress_report& report) {
        if (report.rank != 0) return;
        self->state.last_report = report;
        self->send(self->state.head, report);
      },
      [=](const log_line& line) { self->send(self->state.head, line); },
      [=](const worker_finished& wf) {
        auto& st = self->state;
        if (!is_mine(self, wf.job_id, wf.attempt)) return;
        if (!wf.ok) {
          fail_rank(self, wf.rank, wf.reason, wf.kind);
          return;
        }
        st.done.insert(wf.rank);
        if (static_cast<std::int32_t>(st.done.size()) == world) settle(self, true, {});
      },
      [=](reintroduce) {
        auto& st = self->state;
        self->send(st.head, trainer_started{st.setup.job_id, st.setup.attempt});
        if (st.started == world)
          self->send(st.head, attempt_running{st.setup.job_id, st.setup.attempt});
        // A restarted head learns the step (and a hold) without waiting for the next report.
        if (st.last_report) self->send(st.head, *st.last_report);
      },
      [=](const checkpoint_attempt& req) {
        auto& st = self->state;
        if (!is_mine(self, req.job_id, req.attempt) || !st.store) return;
        try {  // rank 0 takes the request before its next step
          core::comm::tcp_store client(st.store->host(), st.store->port(), st.store_secret,
                                       std::chrono::seconds(5));
          client.set(core::train::checkpoint_request_key(req.job_id, req.attempt), "1");
        } catch (const std::exception& e) {
          self->send(st.head, log_line{req.job_id, -1, st.setup.trainer_node, 0,
                                       std::string("trainer: cannot pass on the checkpoint request: ") + e.what()});
        }
      },
      [=](const release_attempt& req) {
        auto& st = self->state;
        if (!is_mine(self, req.job_id, req.attempt) || !st.store) return;
        try {  // every rank polls this key at run.hold_before_step
          core::comm::tcp_store client(st.store->host(), st.store->port(), st.store_secret,
                                       std::chrono::seconds(5));
          client.set(core::train::hold_release_key(req.job_id, req.attempt), "1");
        } catch (const std::exception& e) {
          self->send(st.head, log_line{req.job_id, -1, st.setup.trainer_node, 0,
                                       std::string("trainer: cannot pass on the release: ") + e.what()});
        }
      },
      [=](const stop_attempt& req) {
        auto& st = self->state;
        if (!is_mine(self, req.job_id, req.attempt)) return;
        st.settled = true;  // the head asked: no outcome to report
        log_store_refusals(self);
        for (auto& w : st.workers)
          if (w) self->send(w, req);
        self->quit(caf::exit_reason::user_shutdown);
      },
  };
}

}  // namespace cohort::actors
