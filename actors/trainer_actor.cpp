// The trainer actor: drives one attempt of one job. It serves the attempt's rendezvous store,
// starts the worker group through the nodes, forwards rank 0's progress to the head, passes the
// head's checkpoint requests, releases and preemption on to every worker (worker_command), and ends
// the attempt at the first failure (stopping the other workers) or when every rank has finished.
#include <chrono>
#include <iostream>
#include <optional>

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
  // Kept until a head acknowledges it (outcome_ack); a head that adopts the trainer meanwhile
  // gets it again.
  st.outcome = attempt_outcome{st.setup.job_id, st.setup.attempt, succeeded, cause};
  self->send(st.head, *st.outcome);
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

// The hang detector named a rank: kill its process and end the attempt, blaming that rank.
void fail_hung(trainer_ptr self, const hang_verdict& v) {
  auto& st = self->state;
  if (st.settled) return;
  if (auto& w = st.workers[static_cast<std::size_t>(v.rank)])
    self->send(w, kill_hung_worker{st.setup.job_id, st.setup.attempt, v.rank});
  self->send(st.head, log_line{st.setup.job_id, -1, st.setup.trainer_node, 0,
                               "trainer: " + v.reason + "; killing its process " +
                                   std::to_string(v.pid) + " (SIGKILL) and ending attempt " +
                                   std::to_string(st.setup.attempt + 1)});
  failure_cause cause{0, v.rank, v.node, v.reason, failure_kind::retryable};
  cause.hung = true;
  cause.pid = v.pid;
  cause.last_step = v.last_step;
  settle(self, false, cause);
}

bool is_mine(trainer_ptr self, const std::string& job_id, std::int32_t attempt) {
  return job_id == self->state.setup.job_id && attempt == self->state.setup.attempt;
}

// A head command of `epoch`: false (and the refusal logged, to the node's stderr and the job's
// log, which the current leader keeps) when a newer leader has been seen.
bool admitted(trainer_ptr self, std::int64_t epoch, const char* command) {
  auto& st = self->state;
  if (!st.fence) return true;
  auto refused = st.fence->refuse(epoch, std::string(command) + " of job " + st.setup.job_id +
                                             " attempt " + std::to_string(st.setup.attempt + 1));
  if (!refused) return true;
  std::cerr << "trainer: " << *refused << std::endl;
  self->send(st.head, log_line{st.setup.job_id, -1, st.setup.trainer_node, 0, "trainer: " + *refused});
  return false;
}

// A line of the attempt's output on its way to the head: numbered and kept until the head
// acknowledges it (bounded: the oldest are dropped and counted).
void forward_log(trainer_ptr self, log_line line) {
  auto& st = self->state;
  line.attempt = st.setup.attempt;
  line.seq = ++st.next_log_seq;
  st.unacked_log_bytes += line.text.size();
  st.unacked_logs.push_back(line);
  while (st.unacked_log_bytes > max_unacked_log_bytes && st.unacked_logs.size() > 1) {
    st.unacked_log_bytes -= st.unacked_logs.front().text.size();
    st.unacked_logs.pop_front();
    ++st.dropped_logs;
  }
  self->send(st.head, line);
}

// What the ranks do besides their steps: ranks past the step allowance in a save or export go to
// the job's log (once each), and a change of the activity goes to the head with rank 0's newest
// report (`submit status` shows it).
void report_activity(trainer_ptr self) {
  auto& st = self->state;
  for (const auto& line : st.hang->long_phases(now_s()))
    forward_log(self, log_line{st.setup.job_id, -1, st.setup.trainer_node, 0, "trainer: " + line});
  auto activity = st.hang->activity();
  if (!st.last_report || activity == st.last_report->activity) return;
  st.last_report->activity = std::move(activity);
  self->send(st.head, *st.last_report);
}

// Tells every started worker of the attempt (a worker that starts later is told in
// worker_started). Asynchronous: no handler waits on a worker.
void tell_workers(trainer_ptr self, worker_command_kind kind, std::int64_t n) {
  auto& st = self->state;
  for (auto& w : st.workers)
    if (w) self->send(w, worker_command{st.setup.job_id, st.setup.attempt, kind, n});
}

// What the attempt's workers were told so far, for one that has just started.
void tell_late_worker(trainer_ptr self, const caf::actor& worker) {
  auto& st = self->state;
  const auto& s = st.setup;
  if (st.releases > 0)
    self->send(worker, worker_command{s.job_id, s.attempt, worker_command_kind::release, st.releases});
  if (st.checkpoint_requests > 0)
    self->send(worker, worker_command{s.job_id, s.attempt,
                                      st.preempted ? worker_command_kind::preempt
                                                   : worker_command_kind::checkpoint,
                                      st.checkpoint_requests});
}

}  // namespace

caf::behavior trainer_actor(trainer_ptr self, trainer_setup setup, caf::actor head,
                            std::shared_ptr<node_directory> directory, std::string bind_address,
                            std::shared_ptr<epoch_fence> fence) {
  auto& st = self->state;
  st.setup = setup;
  st.fence = std::move(fence);
  st.head = head;
  // First of all, so the head supervises this attempt whatever happens next.
  self->send(head, trainer_started{setup.job_id, setup.attempt});
  const auto world = static_cast<std::int32_t>(setup.rank_nodes.size());
  st.workers.resize(world);
  st.pids.resize(world);
  const auto& f = setup.spec.run.failure;
  st.hang.emplace(setup.rank_nodes, hang_limits{f.hang_timeout_s, f.startup_timeout_s, f.checkpoint_timeout_s},
                  now_s());
  st.hang_check_every = std::chrono::milliseconds(
      static_cast<std::int64_t>(heartbeat_interval_s(f.hang_timeout_s) * 1000));
  self->delayed_send(self, st.hang_check_every, hang_check{});

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
    self->send(node, start_worker{worker_setup{setup.job_id, setup.spec, rank, world,
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
        st.pids[ws.rank] = ws.pid;
        if (st.hang) st.hang->on_started(ws.rank, ws.pid);
        st.rank_of[worker.address()] = ws.rank;
        tell_late_worker(self, worker);
        if (++st.started == world)
          self->send(st.head, attempt_running{st.setup.job_id, st.setup.attempt});
      },
      [=](const progress_report& report) {
        auto& st = self->state;
        if (report.job_id != st.setup.job_id) return;
        if (st.hang) st.hang->on_progress(report.rank, report.step, now_s());
        if (report.rank != 0) return;
        if (st.hang && report.held_before_step > 0) st.hang->hold();
        if (st.hang && report.held_before_step == 0 && st.last_report && st.last_report->held_before_step > 0)
          st.hang->release(now_s());
        st.last_report = report;
        st.last_report->attempt = st.setup.attempt;  // the head counts only its current attempt's
        if (st.hang) st.last_report->activity = st.hang->activity();
        self->send(st.head, *st.last_report);
      },
      [=](const rank_heartbeat& hb) {
        auto& st = self->state;
        if (!is_mine(self, hb.job_id, hb.attempt) || !st.hang) return;
        st.hang->on_heartbeat(hb.rank, hb.step,
                              hb.collective_wait_s >= 0 ? std::optional<double>(hb.collective_wait_s)
                                                        : std::nullopt,
                              now_s(), reading_of(hb.activity));
      },
      [=](hang_check) {
        auto& st = self->state;
        if (st.settled || !st.hang) return;
        if (auto verdict = st.hang->check(now_s())) {
          fail_hung(self, *verdict);
          return;
        }
        report_activity(self);
        self->delayed_send(self, st.hang_check_every, hang_check{});
      },
      [=](const log_line& line) { forward_log(self, line); },
      [=](const outcome_ack& ack) {
        auto& st = self->state;
        if (!is_mine(self, ack.job_id, ack.attempt) || !st.outcome ||
            !admitted(self, ack.epoch, "outcome_ack"))
          return;
        self->quit();
      },
      [=](const log_ack& ack) {
        auto& st = self->state;
        if (!is_mine(self, ack.job_id, ack.attempt) || !admitted(self, ack.epoch, "log_ack")) return;
        while (!st.unacked_logs.empty() && st.unacked_logs.front().seq <= ack.seq) {
          st.unacked_log_bytes -= st.unacked_logs.front().text.size();
          st.unacked_logs.pop_front();
        }
      },
      [=](const worker_finished& wf) {
        auto& st = self->state;
        if (!is_mine(self, wf.job_id, wf.attempt)) return;
        if (!wf.ok) {
          // A rank whose collective timed out waiting on a silent peer does not take the blame.
          if (st.hang && wf.kind == failure_kind::retryable)
            if (auto peer = st.hang->silent_peer(wf.rank, now_s())) {
              fail_hung(self, *peer);
              return;
            }
          const auto& nodes = st.setup.rank_nodes;
          failure_cause cause{0, wf.rank,
                              wf.rank >= 0 && wf.rank < world ? nodes[static_cast<std::size_t>(wf.rank)] : "",
                              wf.reason, wf.kind};
          cause.pid = wf.rank >= 0 && wf.rank < world ? st.pids[static_cast<std::size_t>(wf.rank)] : 0;
          cause.report = wf.report;
          settle(self, false, cause);
          return;
        }
        if (st.hang) st.hang->on_finished(wf.rank);
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
        // And gets the output no head acknowledged: lines written while no leader was reachable
        // (or sent to one that died before storing them). The head stores each seq once.
        if (st.dropped_logs > 0) {
          self->send(st.head, log_line{st.setup.job_id, -1, st.setup.trainer_node, 0,
                                       "trainer: " + std::to_string(st.dropped_logs) +
                                           " lines of output were dropped while no head "
                                           "acknowledged them (kept at most " +
                                           std::to_string(max_unacked_log_bytes >> 20) + " MiB)"});
          st.dropped_logs = 0;
        }
        for (const auto& line : st.unacked_logs) self->send(st.head, line);
        if (st.outcome) self->send(st.head, *st.outcome);
      },
      [=](const checkpoint_attempt& req) {
        auto& st = self->state;
        if (!is_mine(self, req.job_id, req.attempt) || !admitted(self, req.epoch, "checkpoint_attempt"))
          return;
        // Rank 0 takes it before its next step (a preempted attempt's workers keep their mark).
        tell_workers(self, st.preempted ? worker_command_kind::preempt : worker_command_kind::checkpoint,
                     ++st.checkpoint_requests);
      },
      [=](const preempt_attempt& req) {
        auto& st = self->state;
        if (!is_mine(self, req.job_id, req.attempt) || !admitted(self, req.epoch, "preempt_attempt"))
          return;
        // One command: the worker marks the preemption before it counts the request that comes
        // with it, so rank 0 that takes the request sees the mark.
        st.preempted = true;
        tell_workers(self, worker_command_kind::preempt, ++st.checkpoint_requests);
      },
      [=](const release_attempt& req) {
        auto& st = self->state;
        if (!is_mine(self, req.job_id, req.attempt) || !admitted(self, req.epoch, "release_attempt"))
          return;
        tell_workers(self, worker_command_kind::release, ++st.releases);  // one hold each
        forward_log(self, log_line{req.job_id, -1, st.setup.trainer_node, 0,
                                   "trainer: released attempt " + std::to_string(req.attempt + 1) +
                                       " at the request of the head of epoch " +
                                       std::to_string(req.epoch)});
      },
      [=](const stop_attempt& req) {
        auto& st = self->state;
        if (!is_mine(self, req.job_id, req.attempt) || !admitted(self, req.epoch, "stop_attempt"))
          return;
        st.settled = true;  // the head asked: no outcome to report
        log_store_refusals(self);
        for (auto& w : st.workers)
          if (w) self->send(w, req);
        self->quit(caf::exit_reason::user_shutdown);
      },
  };
}

}  // namespace cohort::actors
