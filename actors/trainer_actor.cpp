// The trainer actor: drives one attempt of one job. It serves the attempt's rendezvous store,
// starts the worker group through the nodes, and hands every event to its attempt_state
// (attempt_state.hpp: progress to the head, the head's commands on to every worker, the end of the
// attempt at the first failure or when every rank has finished), sending what that returns.
#include <chrono>
#include <variant>

#include <caf/all.hpp>

#include "actors/actor_system_types.hpp"
#include "actors/trainer_actor.hpp"
#include "config/job_spec.hpp"
#include "core/comm/store_auth.hpp"
#include "core/comm/tcp_store.hpp"

namespace cohort::actors {

namespace {

// The trainer's own timer: time to ask the hang detector.
struct hang_check {};

}  // namespace
}  // namespace cohort::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(cohort::actors::hang_check)

namespace cohort::actors {

namespace {

// Seconds on the monotonic clock the hang detector judges by.
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

using trainer_ptr = caf::stateful_actor<trainer_actor_state>*;

// The attempt's totals of refused and dropped store clients, as a line of the job's log.
void log_store_refusals(trainer_ptr self) {
  auto& st = self->state;
  const auto& s = st.attempt->setup();
  if (st.store && st.store->refused_count() + st.store->dropped_count() > 0)
    self->send(st.head, log_line{s.job_id, -1, s.trainer_node, 0,
                                 "trainer: rendezvous store of attempt " + std::to_string(s.attempt) +
                                     " refused " + std::to_string(st.store->refused_count()) +
                                     " unauthenticated clients and dropped " +
                                     std::to_string(st.store->dropped_count()) + " for bad frames"});
}

// Sends what the attempt_state returned: to the head, to workers by rank, and quits when told.
void apply(trainer_ptr self, attempt_actions out) {
  auto& st = self->state;
  if (out.settled) log_store_refusals(self);
  for (auto& [rank, message] : out.to_workers)
    if (const auto& w = st.workers[static_cast<std::size_t>(rank)])
      std::visit([&](auto& m) { self->send(w, std::move(m)); }, message);
  for (auto& message : out.to_head) std::visit([&](auto& m) { self->send(st.head, std::move(m)); }, message);
  if (out.stopped)
    self->quit(caf::exit_reason::user_shutdown);
  else if (out.quit)
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

// Serves the attempt's rendezvous store and asks each rank's node to start its worker. False
// when the attempt failed on the way (its outcome sent).
bool start_workers(trainer_ptr self, const std::shared_ptr<node_directory>& directory,
                   const std::string& bind_address) {
  auto& st = self->state;
  const trainer_setup& setup = st.attempt->setup();
  std::string store_address;
  try {
    st.store_secret = core::comm::make_store_secret();
    st.store = std::make_unique<core::comm::tcp_store_server>(
        bind_address, 0, st.store_secret, report_refusals(st.head, setup.job_id, setup.trainer_node));
    store_address = st.store->host() + ":" + std::to_string(st.store->port());
  } catch (const std::exception& e) {
    apply(self,
          st.attempt->on_start_failed(-1, std::string("cannot serve the rendezvous store: ") + e.what()));
    return false;
  }
  const std::int32_t world = st.attempt->world();
  for (std::int32_t rank = 0; rank < world; ++rank) {
    auto node = directory->find(setup.rank_nodes[rank]);
    if (!node) {
      apply(self, st.attempt->on_start_failed(rank, "node " + setup.rank_nodes[rank] + " is not reachable"));
      return false;
    }
    const auto gpus = static_cast<std::size_t>(rank) < setup.rank_gpus.size()
                          ? setup.rank_gpus[static_cast<std::size_t>(rank)]
                          : std::vector<std::int32_t>{};
    worker_setup ws{
        setup.job_id,           setup.spec,    rank, world, setup.attempt,
        setup.rank_nodes[rank], store_address, "",   gpus,  core::comm::store_secret_to_hex(st.store_secret)};
    for (std::int32_t other = 0; other < world; ++other) {  // the ranks before it on its node, and all there
      if (setup.rank_nodes[other] != setup.rank_nodes[rank]) continue;
      ws.local_rank += other < rank ? 1 : 0;
      ws.local_world += other != rank ? 1 : 0;
    }
    self->send(node, start_worker{std::move(ws)});
  }
  return true;
}

// A worker's actor went down: unless its rank finished, the attempt fails blaming it.
void on_worker_down(trainer_ptr self, const caf::down_msg& msg) {
  auto& st = self->state;
  const auto it = st.rank_of.find(msg.source);
  if (it == st.rank_of.end()) return;
  // No reason: its last messages came first (the bridge keeps that order too).
  apply(self,
        st.attempt->on_worker_lost(it->second, msg.reason ? describe(self->system(), msg.reason)
                                                          : "exited without reporting how its run ended"));
}

void on_worker_started(trainer_ptr self, const worker_started& ws) {
  auto& st = self->state;
  if (!st.attempt->mine(ws.job_id, ws.attempt) || ws.rank < 0 || ws.rank >= st.attempt->world()) return;
  auto worker = caf::actor_cast<caf::actor>(self->current_sender());
  self->monitor(worker);
  st.workers[static_cast<std::size_t>(ws.rank)] = worker;
  st.rank_of[worker.address()] = ws.rank;
  apply(self, st.attempt->on_worker_started(ws.rank, ws.pid));
}

void on_hang_check(trainer_ptr self) {
  auto& st = self->state;
  bool again = false;
  apply(self, st.attempt->on_hang_check(now_s(), again));
  if (again) self->delayed_send(self, st.hang_check_every, hang_check{});
}

}  // namespace

caf::behavior trainer_actor(trainer_ptr self, trainer_setup setup, caf::actor head,
                            std::shared_ptr<node_directory> directory, std::string bind_address,
                            std::shared_ptr<epoch_fence> fence) {
  auto& st = self->state;
  st.head = head;
  // First of all, so the head supervises this attempt whatever happens next.
  self->send(head, trainer_started{setup.job_id, setup.attempt});
  st.attempt.emplace(std::move(setup), std::move(fence), now_s());
  st.workers.resize(static_cast<std::size_t>(st.attempt->world()));
  st.hang_check_every =
      std::chrono::milliseconds(static_cast<std::int64_t>(st.attempt->hang_check_every_s() * 1000));
  self->delayed_send(self, st.hang_check_every, hang_check{});
  self->set_down_handler([=](caf::down_msg& msg) { on_worker_down(self, msg); });
  if (!start_workers(self, directory, bind_address)) return {};
  return {
      [=](const worker_started& ws) { on_worker_started(self, ws); },
      [=](const progress_report& r) { apply(self, self->state.attempt->on_progress(r, now_s())); },
      [=](const rank_heartbeat& hb) { self->state.attempt->on_heartbeat(hb, now_s()); },
      [=](hang_check) { on_hang_check(self); },
      [=](const log_line& line) { apply(self, self->state.attempt->on_log(line)); },
      [=](const worker_finished& wf) { apply(self, self->state.attempt->on_worker_finished(wf, now_s())); },
      [=](reintroduce) { apply(self, self->state.attempt->on_reintroduce()); },
      [=](const outcome_ack& m) { apply(self, self->state.attempt->on_outcome_ack(m)); },
      [=](const log_ack& m) { apply(self, self->state.attempt->on_log_ack(m)); },
      [=](const checkpoint_attempt& m) { apply(self, self->state.attempt->on_checkpoint(m)); },
      [=](const preempt_attempt& m) { apply(self, self->state.attempt->on_preempt(m)); },
      [=](const release_attempt& m) { apply(self, self->state.attempt->on_release(m)); },
      [=](const stop_attempt& m) { apply(self, self->state.attempt->on_stop(m)); },
  };
}

}  // namespace cohort::actors
