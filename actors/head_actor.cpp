// The head actor: registers nodes, accepts jobs, places them, starts each attempt's trainer on
// rank 0's node, and applies the failure policy when an attempt ends (logic in head_state).
#include <caf/all.hpp>

#include <algorithm>
#include <iostream>

#include "actors/client_protocol.hpp"
#include "actors/head_actor.hpp"
#include "actors/head_metrics.hpp"
#include "actors/store_writer.hpp"
#include "config/job_spec.hpp"
#include "config/storage_roots.hpp"
#include "core/proc/line_output.hpp"
#include "core/store/leader_lease.hpp"
#include "core/store/store_error.hpp"
#include "core/train/job_preflight.hpp"
#include "net/json_inspector.hpp"

namespace cohort::actors {

namespace {

using head_ptr = caf::stateful_actor<head_actor_state>*;

caf::error request_error(const std::string& message) {
  return caf::make_error(caf::sec::invalid_argument, message);
}

// Ends the head: it no longer leads. The exit reason says so and names the new leader (read from
// the store, unless `store_reachable` is false: it did not answer); the gateway answers clients
// with it and cluster-head prints it.
void step_down(head_ptr self, const std::string& what, bool store_reachable = true) {
  auto& st = self->state;
  if (!st.lease.end()) return;
  std::optional<core::store::lease_record> leader;
  try {
    if (store_reachable) leader = st.options.store->lease().current();
  } catch (const std::exception& e) {
    core::proc::say_whole_line(std::cerr,
                               std::string("cluster-head: cannot read the leader lease: ") + e.what());
  }
  self->quit(caf::make_error(caf::sec::runtime_error,
                             step_down_reason(st.options.epoch, what, leader)));
}

using steady = std::chrono::steady_clock;

// Takes in a renewal of the lease started at `started` (renewed, or `error` when the store did not
// answer); true when this head still leads (then it may act until lease_valid_until).
bool renewal(head_ptr self, steady::time_point started, bool renewed, const std::string& error) {
  auto& st = self->state;
  if (!error.empty())
    core::proc::say_whole_line(std::cerr, "cluster-head: cannot renew the leader lease: " + error);
  switch (st.lease.on_renewal(started, error.empty(), renewed, steady::now())) {
    case leader_session::verdict::leads:
      return true;
    case leader_session::verdict::cut_off:
      // A standby that reaches the store may lead by now.
      step_down(self, "it could not renew its leader lease before it ran out (" + error + ")", false);
      return false;
    case leader_session::verdict::superseded:
      core::proc::say_whole_line(std::cerr, "cluster-head: lost the leader lease (epoch " +
                                                std::to_string(st.options.epoch) +
                                                "); another head leads now");
      step_down(self, "its leader lease expired and another head claimed a newer epoch");
      return false;
  }
  return false;
}

// When the lease's time is up unrenewed (lease_deadline), the head renews it now, in this handler:
// it leads on when that succeeds, and steps down when another head claimed a newer epoch or the
// store does not answer (renewal). A head cut off from the store stops leading within its lease,
// before a standby can take it, rather than at the first failed renewal after it (the store's
// call timeout may be longer than the lease).
void arm_lease_deadline(head_ptr self) {
  const auto left = self->state.lease.valid_until() - steady::now();
  self->delayed_send(self, std::max<steady::duration>(left, std::chrono::milliseconds(1)), lease_deadline{});
}

// Renews the lease now, in this handler (the lease keeper renews it in the background; this is
// for a head that finds its lease's time up, e.g. woken from SIGSTOP); true when it still leads.
bool renew(head_ptr self) {
  auto& st = self->state;
  const auto started = steady::now();
  try {
    return renewal(self, started, st.options.store->lease().renew(st.options.epoch, st.options.lease_ttl).has_value(), "");
  } catch (const std::exception& e) {
    return renewal(self, started, false, e.what());
  }
}

// Whether this head may write to the store or command nodes and trainers now: it has not stepped
// down, and its lease is known good (renewed within 0.9 ttl), or a renewal now succeeds. A head
// woken from SIGSTOP after a standby claimed a newer epoch steps down here before anything it
// would have written or sent.
bool leads(head_ptr self) {
  auto& st = self->state;
  if (st.lease.ended()) return false;
  if (!st.options.store || st.lease.known_good(steady::now())) return true;
  return renew(self);
}

// Hands a store write (store_job_state, store_log_lines) to the store writer, stamped with this
// head's epoch, only while this head leads; false when it does not. Writes are done in the order
// they are handed over. `written` runs once the write was made, `failed` with the error when it was
// not; a write refused as fenced means another head leads now: this one steps down.
template <class Write, class Written, class Failed>
bool store_write(head_ptr self, const char* what, Write write, Written written, Failed failed) {
  if (!self->state.store_writer || !leads(self)) return false;
  write.epoch = self->state.options.epoch;
  self->request(self->state.store_writer, caf::infinite, std::move(write))
      .then([=](const store_write_result& r) mutable {
        if (r.error.empty()) {
          written();
          return;
        }
        core::proc::say_whole_line(std::cerr, std::string("cluster-head: cannot ") + what + ": " + r.error);
        failed(r.error);
        if (r.fenced) step_down(self, "a store write was fenced (" + r.error + ")");
      });
  return true;
}

template <class Write, class Written>
bool store_write(head_ptr self, const char* what, Write write, Written written) {
  return store_write(self, what, std::move(write), std::move(written), [](const std::string&) {});
}

// Runs `then` once every store write handed over before it was made (or refused: a fenced one has
// made the head step down by then, and commands are no longer sent). What acknowledges that
// something is stored waits for this.
template <class F>
void after_store_writes(head_ptr self, F then) {
  if (!self->state.store_writer) {
    then();
    return;
  }
  self->request(self->state.store_writer, caf::infinite, store_barrier{})
      .then([=](const store_write_result&) mutable { then(); });
}

// Sends a command to a node or trainer, stamped with this head's epoch, only while it leads.
template <class Command>
void command(head_ptr self, const caf::actor& to, Command cmd) {
  if (!leads(self)) return;
  cmd.epoch = self->state.options.epoch;
  self->send(to, std::move(cmd));
}

// Writes the records whose state, reason or placement changed since the last write, and a
// history line for each.
void persist(head_ptr self) {
  if (!self->state.options.store) return;
  for (const auto* r : self->state.logic.records()) {
    const auto fields = persisted_job_fields::of(*r);
    auto last = self->state.persisted.find(r->id);
    if (last != self->state.persisted.end() && last->second == fields) continue;
    self->state.persisted.insert_or_assign(r->id, fields);
    auto record = *r;
    record.spec_json.clear();  // not part of state.json: the store keeps it in spec.json
    store_write(self, "record the job state", store_job_state{0, std::move(record)}, [] {});
  }
}

// The trainer of the job's current attempt, when it has announced itself to this head (null
// otherwise: a restarted head that has not adopted it yet).
caf::actor current_trainer(head_ptr self, const job_record& r) {
  return self->state.trainers.trainer(r.id, r.attempts - 1).value_or(nullptr);
}

caf::error trainer_unknown(const job_record& r) {
  return caf::make_error(caf::sec::runtime_error,
                         "job " + r.id + ": the trainer of attempt " + std::to_string(r.attempts) + " on " +
                             r.trainer_node + " has not announced itself to this head yet; try again");
}

void notify(head_ptr self, const std::string& job_id, const std::string& line) {
  const auto* record = self->state.logic.find(job_id);
  if (record == nullptr) return;
  for (auto& [follower, event] : self->state.output.publish(*record, line))
    self->send(follower, std::move(event));
}

// Tells every node that job `r` ended for good, so that they drop what they keep for its
// restarts (its peer replicas).
void announce_end(head_ptr self, const job_record& r) {
  const auto* spec = self->state.logic.spec(r.id);
  if (spec == nullptr || !spec->run.checkpoint.replicate) return;
  const job_ended ended{r.id, spec->name, spec->run.storage_path, spec->run.local_dir};
  for (const auto& n : self->state.logic.nodes())
    if (auto node = self->state.nodes.find(n.name)) self->send(*node, ended);
}

void notify_state(head_ptr self, const std::string& job_id) {
  persist(self);
  if (const auto* r = self->state.logic.find(job_id)) {
    notify(self, job_id, std::string(to_string(r->state)) + ": " + r->reason);
    if (is_terminal(r->state)) announce_end(self, *r);
  }
}

void forget_trainer(head_ptr self, const std::string& job_id, std::int32_t attempt) {
  if (auto trainer = self->state.trainers.forget(job_id, attempt)) self->demonitor(*trainer);
}

// Asks every elastic attempt that could run on more ranks now (head_state::growable) to save a
// checkpoint after its next step and wait to be stopped (the preemption's command, without a
// deadline); on_progress stops it once that checkpoint commits (end_resize).
void grow_jobs(head_ptr self) {
  auto& st = self->state;
  for (const auto& g : st.logic.growable(core::store::system_clock_ms())) {
    const auto* r = st.logic.find(g.job_id);
    auto trainer = current_trainer(self, *r);
    if (!trainer || !st.logic.begin_resize(g.job_id, g.to)) continue;
    core::proc::say_whole_line(std::cerr, "cluster-head: job " + g.job_id + " grows from " +
                                              std::to_string(g.from) + " to " + std::to_string(g.to) +
                                              " workers");
    command(self, trainer, preempt_attempt{g.job_id, r->attempts - 1, 0, 0});
    notify_state(self, g.job_id);
  }
}

// Places what fits and asks the nodes to start the trainers. Followers of jobs that go (back)
// to PENDING, or that the memory plan refuses (FAILED), hear why. Then elastic jobs grow into
// what is left (grow_jobs).
void start_trainers(head_ptr self) {
  // schedule() adds and removes no job: the records keep their order.
  std::vector<job_state> before;
  for (const auto* r : self->state.logic.records()) before.push_back(r->state);
  auto starts = self->state.logic.schedule();
  std::vector<std::string> changed;
  const auto after = self->state.logic.records();
  for (std::size_t i = 0; i < after.size(); ++i)
    if ((after[i]->state == job_state::pending || is_terminal(after[i]->state)) && before[i] != after[i]->state)
      changed.push_back(after[i]->id);
  for (const auto& id : changed) notify_state(self, id);
  for (auto& setup : starts) {
    notify(self, setup.job_id, "placed: trainer on " + setup.trainer_node + ", ranks on [" +
                                   [&] {
                                     std::string s;
                                     for (const auto& n : setup.rank_nodes)
                                       s += (s.empty() ? "" : ", ") + n;
                                     return s;
                                   }() +
                                   "], attempt " + std::to_string(setup.attempt + 1));
    auto node = self->state.nodes.find(setup.trainer_node);
    if (!node) {
      self->state.logic.on_trainer_lost(setup.job_id, setup.attempt,
                                        "node " + setup.trainer_node + " is gone");
      notify_state(self, setup.job_id);
      continue;
    }
    command(self, *node, start_trainer{setup});
  }
  grow_jobs(self);
  persist(self);
}

// Stops the current attempt of a job in a phase (`in_phase`: head_state::preempting or
// resizing; nothing otherwise), its trainer told `why`, ends it in head_state with `settle`
// (on_preempted, on_resized), and places what fits, its restart included.
void stop_and_restart(head_ptr self, const std::string& job_id,
                      bool (head_state::*in_phase)(const std::string&) const, const char* why,
                      const job_record& (head_state::*settle)(const std::string&, std::int32_t)) {
  auto& logic = self->state.logic;
  const auto* r = logic.find(job_id);
  if (r == nullptr || !(logic.*in_phase)(job_id)) return;
  const auto attempt = r->attempts - 1;
  if (auto trainer = current_trainer(self, *r)) command(self, trainer, stop_attempt{job_id, attempt, why});
  forget_trainer(self, job_id, attempt);
  (logic.*settle)(job_id, attempt);
  notify_state(self, job_id);
  start_trainers(self);
}

// Stops an attempt whose resize checkpoint committed and restarts the job on more workers.
void end_resize(head_ptr self, const std::string& job_id) {
  stop_and_restart(self, job_id, &head_state::resizing, "the attempt is restarted on more workers",
                   &head_state::on_resized);
}

// Stops a preempted attempt (its emergency checkpoint committed, or its grace is over, or it
// could not save one) and restarts the job under failure.max_preemptions.
void end_preemption(head_ptr self, const std::string& job_id) {
  stop_and_restart(self, job_id, &head_state::preempting, "the attempt was preempted",
                   &head_state::on_preempted);
}

// Drains `node` (kind "preempted" or "drained", see head_state::drain): every job with ranks there
// saves an emergency checkpoint and is stopped once it commits (or its grace is over); a job that
// cannot save one now (not running yet, no checkpoints in its workload, no grace) is stopped at
// once. `notice_deadline_ms`: a cloud's notice's deadline (unix ms; 0: none), which shortens the
// grace. Returns the jobs preempted; throws std::invalid_argument for an unknown node.
std::vector<std::string> drain_node_now(head_ptr self, const std::string& node, const std::string& kind,
                                        const std::string& why, std::int64_t notice_deadline_ms = 0) {
  auto& st = self->state;
  const auto jobs = st.logic.drain(node, kind);
  core::proc::say_whole_line(std::cerr, "cluster-head: " + why + ": no new placement on it; " +
                                            std::to_string(jobs.size()) +
                                            " job(s) with ranks there are preempted");
  std::vector<std::string> preempted;
  for (const auto& id : jobs) {
    const auto now_ms = core::store::system_clock_ms();
    if (!st.logic.begin_preemption(id, node, why, now_ms, notice_deadline_ms)) continue;
    preempted.push_back(id);
    const auto* r = st.logic.find(id);
    const auto* spec = st.logic.spec(id);
    auto trainer = current_trainer(self, *r);
    const double grace = spec->run.failure.preemption_grace_s;
    if (r->state != job_state::running || !config::trains_model(spec->workload) || !trainer || grace <= 0) {
      end_preemption(self, id);
      continue;
    }
    const auto deadline_ms = st.logic.preemption_deadline_ms(id);
    command(self, trainer, preempt_attempt{id, r->attempts - 1, 0, deadline_ms});
    self->delayed_send(self, std::chrono::milliseconds(std::max<std::int64_t>(0, deadline_ms - now_ms)),
                       preemption_deadline{id, r->attempts - 1});
    notify_state(self, id);
  }
  persist(self);
  return preempted;
}

// Puts back the jobs of the store (a restarted head) and schedules the adoption deadline.
void restore_jobs(head_ptr self) {
  auto& st = self->state;
  if (!st.options.store) return;
  for (const auto& stored : st.options.store->list_jobs()) {
    job_record r;
    try {
      auto spec = config::parse_job_spec(stored.spec_json);
      if (stored.state) {
        r = net::from_json_view<job_record>(*stored.state);
      } else {
        r.id = stored.id;
        r.name = spec.name;
        r.reason = "waiting for placement";
      }
      r.spec_json = config::to_json_text(spec);
      st.logic.restore(r, std::move(spec));
    } catch (const std::exception& e) {
      core::proc::say_whole_line(std::cerr,
                                 "cluster-head: cannot restore job " + stored.id + ": " + e.what());
    }
  }
  for (const auto& r : st.logic.jobs()) {
    st.persisted.insert_or_assign(r.id, persisted_job_fields::of(r));
    if (is_terminal(r.state)) continue;
    // What earlier heads stored of the running attempts' output: lines their trainers send again
    // are stored once.
    try {
      for (const auto& j : st.options.store->read_logs(r.id)) st.output.stored_lines().restore(r.id, j);
    } catch (const std::exception& e) {
      core::proc::say_whole_line(std::cerr,
                                 "cluster-head: cannot read the logs of job " + r.id + ": " + e.what());
    }
  }
  if (!st.logic.awaiting_adoption().empty())
    self->delayed_send(self, st.options.adoption_grace, adoption_deadline{});
  // A preemption the previous head began ends by its deadline here too (a resize ends when its
  // checkpoint commits, which the adopted trainer reports again).
  const auto now_ms = core::store::system_clock_ms();
  for (const auto& r : st.logic.jobs()) {
    const auto deadline_ms = st.logic.preemption_deadline_ms(r.id);
    if (deadline_ms > 0)
      self->delayed_send(self, std::chrono::milliseconds(std::max<std::int64_t>(0, deadline_ms - now_ms)),
                         preemption_deadline{r.id, r.attempts - 1});
  }
}

// ---- The client requests (actors/client_protocol.hpp): one serve_client per request of the table,
// answering the reply type the table names ----

caf::result<drain_reply> serve_client(head_ptr self, const drain_node& req) {
  auto& st = self->state;
  if (req.drain) {
    try {
      auto jobs = drain_node_now(self, req.node, "drained",
                                 "node " + req.node + " is drained on request (submit drain)");
      return drain_reply{req.node, st.logic.drain_state(req.node), jobs};
    } catch (const std::exception& e) {
      return request_error(std::string("submit drain: ") + e.what());
    }
  }
  if (!st.logic.has_node(req.node) && st.logic.drain_state(req.node).empty())
    return request_error("submit undrain: no node named \"" + req.node + "\" is registered or drained");
  if (!st.logic.undrain(req.node))
    return request_error("submit undrain: node " + req.node + " is not draining");
  core::proc::say_whole_line(std::cerr,
                             "cluster-head: node " + req.node + " is schedulable again (submit undrain)");
  start_trainers(self);
  return drain_reply{req.node, st.logic.drain_state(req.node), {}};
}

// Stops a job and its current attempt's trainer; false when the job is unknown or ended.
bool stop_job_now(head_ptr self, const std::string& job_id, const std::string& reason) {
  auto& st = self->state;
  const auto* r = st.logic.find(job_id);
  if (r == nullptr) return false;
  const auto attempt = r->attempts - 1;
  if (!st.logic.stop(job_id, reason)) return false;
  for (const auto& trainer : st.trainers.trainers_of(job_id))
    command(self, trainer, stop_attempt{job_id, attempt, "the job was stopped"});
  forget_trainer(self, job_id, attempt);
  notify_state(self, job_id);
  start_trainers(self);
  return true;
}

// Accepts a job under `id`, a job id the store writer took ahead: places it at once and starts its
// trainer; its spec goes to the store writer first of its writes, and the client hears that it
// was accepted once the spec and the state are stored, or that it could not be recorded (the job
// is stopped then).
void accept_job(head_ptr self, head_actor_state::waiting_submit submit, const std::string& id) {
  auto& st = self->state;
  const auto accepted = st.logic.submit(submit.spec, config::to_json_text(submit.spec), id);
  auto not_stored = std::make_shared<std::string>();
  if (!store_write(self, "record the job's spec", store_job_spec{0, id, submit.spec_json}, [] {},
                   [not_stored](const std::string& error) { *not_stored = error; }))
    *not_stored = "this head no longer leads; submit to the new leader";
  persist(self);
  start_trainers(self);
  after_store_writes(self, [=, promise = std::move(submit.promise)]() mutable {
    if (not_stored->empty()) {
      promise.deliver(job_accepted{accepted});
      return;
    }
    stop_job_now(self, accepted, "cannot record the job: " + *not_stored);
    promise.deliver(caf::make_error(caf::sec::runtime_error, "cannot record the job: " + *not_stored));
  });
}

// Keeps one job id taken in the store ahead of the next submit (store_reserve_job_id), so that a
// job is placed without waiting for the store; submits that come while none is ready wait for
// the next, in their order (ids follow submission order). A reservation that fails fails the
// submits waiting for it; the next submit tries again.
void reserve_job_id(head_ptr self) {
  auto& st = self->state;
  if (!st.store_writer || !st.job_ids.should_reserve() || !leads(self)) return;
  st.job_ids.reserving();
  self->request(st.store_writer, caf::infinite, store_reserve_job_id{st.options.epoch})
      .then([=](const store_reserved_id& r) {
        auto& st = self->state;
        if (!r.result.error.empty()) {
          core::proc::say_whole_line(std::cerr, "cluster-head: cannot take a job id: " + r.result.error);
          for (auto& w : st.job_ids.on_reserve_failed())
            w.promise.deliver(
                caf::make_error(caf::sec::runtime_error, "cannot record the job: " + r.result.error));
          if (r.result.fenced) step_down(self, "a store write was fenced (" + r.result.error + ")");
          return;
        }
        auto next = st.job_ids.on_reserved(r.job_id);
        if (!next) return;
        reserve_job_id(self);  // before the job's writes: the next id is taken when it is answered
        accept_job(self, std::move(next->first), next->second);
      });
}

caf::result<job_accepted> serve_client(head_ptr self, const submit_job& req) {
  config::job_spec spec;
  try {
    spec = config::parse_job_spec(req.spec_json);
    config::check_runnable(spec);
    // Before anything reads the paths: a refused path is not even looked into.
    config::check_storage_roots(spec, self->state.options.storage_roots);
    core::train::check_data_set(spec);
  } catch (const std::exception& e) {
    return request_error(e.what());
  }
  auto& st = self->state;
  if (!st.options.store) {
    const auto id = st.logic.submit(spec, config::to_json_text(spec));
    persist(self);
    start_trainers(self);
    return job_accepted{id};
  }
  if (!leads(self))
    return caf::make_error(caf::sec::runtime_error, "this head no longer leads; submit to the new leader");
  head_actor_state::waiting_submit submit{std::move(spec), req.spec_json,
                                          self->make_response_promise<job_accepted>()};
  auto promise = submit.promise;
  auto now = st.job_ids.submit(std::move(submit));
  reserve_job_id(self);  // before the job's writes: the next id is taken when it is answered
  if (now) accept_job(self, std::move(now->first), now->second);
  return promise;
}

caf::result<job_record> serve_client(head_ptr self, const job_query& q) {
  if (const auto* r = self->state.logic.find(q.job_id)) return *r;
  return request_error("no job with id " + q.job_id);
}

caf::result<job_list> serve_client(head_ptr self, const job_list_query&) {
  return job_list{self->state.logic.jobs(), self->state.logic.nodes()};
}

caf::result<job_record> serve_client(head_ptr self, const stop_job& req) {
  const auto* r = self->state.logic.find(req.job_id);
  if (r == nullptr) return request_error("no job with id " + req.job_id);
  stop_job_now(self, req.job_id, "stopped on request");
  return *self->state.logic.find(req.job_id);
}

caf::result<job_record> serve_client(head_ptr self, const checkpoint_job& req) {
  auto& st = self->state;
  const auto* r = st.logic.find(req.job_id);
  if (r == nullptr) return request_error("no job with id " + req.job_id);
  if (r->state != job_state::running)
    return request_error("job " + req.job_id + " is " + to_string(r->state) +
                         ": only a RUNNING job can be asked for a checkpoint");
  if (!config::trains_model(st.logic.spec(req.job_id)->workload))
    return request_error("job " + req.job_id + " runs workload " +
                         to_string(st.logic.spec(req.job_id)->workload) +
                         ", which saves no checkpoints (only causal_lm and reward_model do)");
  auto trainer = current_trainer(self, *r);
  if (!trainer) return trainer_unknown(*r);
  command(self, trainer, checkpoint_attempt{req.job_id, r->attempts - 1});
  return *r;
}

caf::result<job_record> serve_client(head_ptr self, const release_job& req) {
  auto& st = self->state;
  const auto* r = st.logic.find(req.job_id);
  if (r == nullptr) return request_error("no job with id " + req.job_id);
  if (!config::has_holds(st.logic.spec(req.job_id)->run))
    return request_error("job " + req.job_id +
                         " has no run.hold_before_step: there is no hold to release");
  if (r->state != job_state::running)
    return request_error("job " + req.job_id + " is " + to_string(r->state) +
                         ": only a RUNNING job can be released");
  auto trainer = current_trainer(self, *r);
  if (!trainer) return trainer_unknown(*r);
  command(self, trainer, release_attempt{req.job_id, r->attempts - 1});
  return *r;
}

caf::result<job_record> serve_client(head_ptr self, const follow_job& req) {
  const auto* r = self->state.logic.find(req.job_id);
  if (r == nullptr) return request_error("no job with id " + req.job_id);
  if (!is_terminal(r->state))
    self->state.output.follow(req.job_id, caf::actor_cast<caf::actor>(self->current_sender()));
  return *r;
}

caf::result<job_logs> serve_client(head_ptr self, const logs_query& q) {
  auto& st = self->state;
  if (st.logic.find(q.job_id) == nullptr) return request_error("no job with id " + q.job_id);
  if (!st.store_writer) return job_logs{st.output.memory_lines(q.job_id)};
  // The store has the output of earlier heads too; the writer reads it after the lines it was
  // handed before.
  auto promise = self->make_response_promise<job_logs>();
  self->request(st.store_writer, caf::infinite, read_job_logs{q.job_id})
      .then([=](job_logs& logs) mutable { promise.deliver(std::move(logs)); },
            [=](caf::error& err) mutable { promise.deliver(std::move(err)); });
  return promise;
}

caf::result<followed_logs> serve_client(head_ptr self, const follow_logs& req) {
  auto& st = self->state;
  const auto* r = st.logic.find(req.job_id);
  if (r == nullptr) return request_error("no job with id " + req.job_id);
  const auto follower = caf::actor_cast<caf::actor>(self->current_sender());
  if (!st.store_writer) {  // the lines in memory and the registration, in one turn
    if (!is_terminal(r->state)) st.output.follow(req.job_id, follower);
    return followed_logs{*r, st.output.memory_lines(req.job_id)};
  }
  // The writer reads after every line handed to it before; the lines handed after are held back
  // for this follower until the reply is out, then sent in order. The reply carries the record as
  // it was here: a job running now is not reported ended before its held events are.
  const std::string job_id = req.job_id;
  const job_record at_request = *r;
  const bool follow = !is_terminal(r->state);
  if (follow) st.output.begin_catch_up(job_id, follower);
  auto promise = self->make_response_promise<followed_logs>();
  self->request(st.store_writer, caf::infinite, read_job_logs{job_id})
      .then(
          [=](job_logs& logs) mutable {
            promise.deliver(followed_logs{at_request, std::move(logs.lines)});
            if (!follow) return;
            const auto* now = self->state.logic.find(job_id);
            for (auto& e : self->state.output.end_catch_up(job_id, follower,
                                                           now != nullptr && !is_terminal(now->state)))
              self->send(follower, std::move(e));
          },
          [=](caf::error& err) mutable {
            self->state.output.drop_catch_up(job_id, follower);
            promise.deliver(std::move(err));
          });
  return promise;
}

caf::result<plan_reply> serve_client(head_ptr self, const plan_request& req) {
  config::job_spec spec;
  try {
    spec = config::parse_job_spec(req.spec_json);
    config::check_storage_roots(spec, self->state.options.storage_roots);
  } catch (const std::exception& e) {
    return request_error(e.what());
  }
  auto result = self->state.logic.plan(spec);
  plan_reply reply{core::resources::to_string(result.status), result.plan.trainer_node,
                   result.plan.rank_nodes, result.reason, {}};
  if (result.status == core::resources::placement_status::placed) {
    try {
      reply.memory = plan_rank_memory(spec);
    } catch (const std::exception& e) {
      return request_error(e.what());
    }
  }
  return reply;
}

// Serves one client request; a command is answered once what it changed is in the store (the
// store writes it handed over are made), as when the head wrote synchronously.
template <class Call>
caf::result<typename Call::reply> serve_call(head_ptr self, const typename Call::request& req) {
  using reply = typename Call::reply;
  caf::result<reply> answer = serve_client(self, req);
  if constexpr (Call::kind == call_kind::command) {
    if (answer.flag == caf::rt_value && self->state.store_writer) {
      auto promise = self->make_response_promise<reply>();
      after_store_writes(self, [promise, value = answer.value]() mutable {
        promise.deliver(value.template get_as<reply>(0));
      });
      return promise;
    }
  }
  return answer;
}

// The head's client handlers, one per entry of client_calls: a request of the table without a
// serve_client overload answering its reply type does not compile.
template <class... Calls>
caf::message_handler client_handlers(head_ptr self, call_list<Calls...>) {
  return caf::message_handler{
      [=](const typename Calls::request& req) -> caf::result<typename Calls::reply> {
        return serve_call<Calls>(self, req);
      }...};
}

// ---- Events: each handler of head_actor() is one of these ----

// With a store: the detached store writer, the jobs restored from the store, and the lease keeper
// (both linked: one that fails takes the head along; the head's end, however it ends, ends them;
// what the writer was still to write is not written: this head no longer leads).
void start_store_actors(head_ptr self) {
  auto& st = self->state;
  if (st.options.store) {
    auto writer = self->spawn<caf::detached + caf::linked>(store_writer, st.options.store);
    self->attach_functor([writer] { caf::anon_send_exit(writer, caf::exit_reason::user_shutdown); });
    st.store_writer = writer;
  }
  restore_jobs(self);
  if (st.options.store) {
    // It renews the lease every third of its ttl (lease_renewal).
    auto keeper = self->spawn<caf::detached + caf::linked>(
        lease_keeper, st.options.store, caf::actor_cast<caf::actor>(self), st.options.epoch,
        st.options.lease_ttl, st.options.fence);
    self->attach_functor([keeper] { caf::anon_send_exit(keeper, caf::exit_reason::user_shutdown); });
    st.lease_keeper = keeper;
  }
}

// Node `name` is gone: its attempts whose trainer never started will never report, and a trainer
// on another node cannot see that ranks of the lost process are gone (nothing tells its process;
// it would wait for them until a collective or hang timeout, and forever while the attempt is
// held): those attempts end here.
void on_node_lost(head_ptr self, const std::string& name) {
  auto& st = self->state;
  st.nodes.forget(name);
  st.logic.remove_node(name);
  for (const auto& id : st.logic.jobs_placed_on(name)) {
    const auto* record = st.logic.find(id);
    const auto attempt = record->attempts - 1;
    if (!st.trainers.trainer(id, attempt)) {
      st.logic.on_trainer_lost(id, attempt, "node " + name + " was lost before the attempt started");
      notify_state(self, id);
      continue;
    }
    if (record->trainer_node == name) continue;  // the trainer's own loss reports it
    const auto trainer = *st.trainers.forget(id, attempt);
    self->demonitor(trainer);
    command(self, trainer, stop_attempt{id, attempt, "node " + name + " was lost"});
    st.logic.on_trainer_lost(id, attempt, "node " + name + " was lost with ranks of the attempt");
    notify_state(self, id);
  }
  start_trainers(self);
}

// The lease's time is up (arm_lease_deadline): renewed now, or the head steps down.
void on_lease_deadline(head_ptr self) {
  auto& st = self->state;
  if (st.lease.ended() || !st.options.store) return;
  if (st.lease.known_good(steady::now()) || renew(self)) arm_lease_deadline(self);
}

// A node process fell silent (the gateway says so before its proxies end): the node is lost now,
// before the downs of its trainers arrive; a trainer's down handled first would place its restart
// on the silent node, an attempt lost again at once.
void on_process_silent(head_ptr self, const process_silent& m) {
  const std::string node_prefix = "node:";
  if (m.process.rfind(node_prefix, 0) != 0) return;
  const auto name = m.process.substr(node_prefix.size());
  auto node = self->state.nodes.silent(name);  // its proxy's down, still to come, is ignored
  if (!node) return;
  self->demonitor(*node);
  on_node_lost(self, name);
}

// A trainer went down; one that finished normally sent its outcome first (the bridge keeps that
// order too), so what is still watched ended without one.
void on_trainer_lost(head_ptr self, const decltype(head_actor_state::trainers)::trainer_ref& ref,
                     const caf::error& reason) {
  self->state.logic.on_trainer_lost(ref.job_id, ref.attempt,
                                    reason ? "trainer died: " + describe(self->system(), reason)
                                           : "the trainer exited without reporting an outcome");
  notify_state(self, ref.job_id);
  start_trainers(self);
}

void on_down(head_ptr self, const caf::down_msg& msg) {
  auto& st = self->state;
  if (auto node = st.nodes.on_down(msg.source)) {
    on_node_lost(self, *node);
    return;
  }
  if (auto ref = st.trainers.on_down(msg.source)) on_trainer_lost(self, *ref, msg.reason);
}

// A node (re)joins. A new process under a known name (its predecessor's loss not yet seen): what
// was sent to the old one is lost, so an attempt placed there whose trainer has not started yet
// never will; it ends here (the down of the old actor, now unwatched, would have said so).
// Attempts with a started trainer end through that trainer's own loss.
void on_node_hello(head_ptr self, const node_hello& hello) {
  auto& st = self->state;
  auto sender = caf::actor_cast<caf::actor>(self->current_sender());
  const std::string& name = hello.info.name;
  if (auto old = st.nodes.join(name, sender.address(), sender)) {
    self->demonitor(*old);
    for (const auto& id : st.logic.jobs_placed_on(name)) {
      const auto attempt = st.logic.find(id)->attempts - 1;
      if (st.trainers.trainer(id, attempt)) continue;  // it started
      st.logic.on_trainer_lost(id, attempt, "node " + name + " restarted before the attempt started");
      notify_state(self, id);
    }
  }
  self->monitor(sender);
  st.logic.add_node(hello.info);
  start_trainers(self);
}

// A node announces that it leaves (only the node itself may).
void on_node_draining(head_ptr self, const node_draining& req) {
  auto& st = self->state;
  auto sender = caf::actor_cast<caf::actor>(self->current_sender());
  if (!st.nodes.speaks_for(req.node, sender)) return;
  try {
    drain_node_now(self, req.node, "preempted", "node " + req.node + " is leaving (" + req.reason + ")",
                   req.deadline_ms);
  } catch (const std::exception& e) {
    core::proc::say_whole_line(std::cerr, "cluster-head: cannot drain node " + req.node + ": " + e.what());
  }
}

void on_preemption_deadline(head_ptr self, const preemption_deadline& d) {
  const auto* r = self->state.logic.find(d.job_id);
  if (r == nullptr || r->attempts - 1 != d.attempt || !self->state.logic.preempting(d.job_id)) return;
  end_preemption(self, d.job_id);
}

// A trainer announces its attempt (first, or again to a head that adopts it): watched, unless the
// head has given the attempt up (stopped, or failed meanwhile), which it is then told.
void on_trainer_started(head_ptr self, const trainer_started& ts) {
  auto& st = self->state;
  auto trainer = caf::actor_cast<caf::actor>(self->current_sender());
  if (!st.logic.on_trainer_started(ts.job_id, ts.attempt)) {
    command(self, trainer, stop_attempt{ts.job_id, ts.attempt, "the attempt is no longer wanted"});
    return;
  }
  const auto watched = st.trainers.watch(trainer.address(), ts.job_id, ts.attempt, trainer);
  if (watched.already) return;  // announced again; already watched
  if (watched.replaced) self->demonitor(*watched.replaced);
  self->monitor(trainer);
  persist(self);
}

// The trainers that did not come back after this head took over are given up.
void on_adoption_deadline(head_ptr self) {
  for (const auto& id : self->state.logic.awaiting_adoption()) {
    const auto* r = self->state.logic.find(id);
    self->state.logic.on_trainer_lost(id, r->attempts - 1,
                                      "the trainer did not come back after the head restarted");
    notify_state(self, id);
  }
  start_trainers(self);
}

metrics_snapshot on_metrics_query(head_ptr self) {
  metrics_snapshot s{
      self->state.options.epoch, job_list{self->state.logic.jobs(), self->state.logic.nodes()}, {}};
  for (const auto& [job, points] : self->state.output.progress())
    if (!points.empty()) s.progress[job] = points.back();
  return s;
}

caf::result<job_history> on_job_history_query(head_ptr self, const job_history_query& q) {
  if (self->state.logic.find(q.job_id) == nullptr) return request_error("no job with id " + q.job_id);
  const auto it = self->state.output.progress().find(q.job_id);
  if (it == self->state.output.progress().end()) return job_history{};
  return job_history{it->second};
}

// To the keeper, the leader record's one writer: a renewal of its own racing this write could put
// the old address back (it did: a head bound to port 0 kept publishing ":0").
void on_publish_address(head_ptr self, const publish_address& p) {
  auto& st = self->state;
  if (st.lease.ended() || !st.lease_keeper) return;
  self->send(st.lease_keeper, p);
}

// An attempt runs: an elastic one below num_workers may grow once its resize interval is over
// (now, when it is 0).
void on_attempt_running(head_ptr self, const attempt_running& ar) {
  auto& logic = self->state.logic;
  const auto now_ms = core::store::system_clock_ms();
  logic.on_running(ar.job_id, ar.attempt, now_ms);
  const auto* r = logic.find(ar.job_id);
  if (r == nullptr || r->state != job_state::running) return;
  notify_state(self, ar.job_id);
  const auto* spec = logic.spec(ar.job_id);
  if (spec->scaling.min_workers <= 0 ||
      r->rank_nodes.size() >= static_cast<std::size_t>(spec->scaling.num_workers))
    return;
  self->delayed_send(
      self, std::chrono::milliseconds(std::max<std::int64_t>(0, logic.resize_due_ms(ar.job_id) - now_ms)),
      resize_due{});
}

void on_progress(head_ptr self, const progress_report& report) {
  auto& logic = self->state.logic;
  if (logic.on_progress(report)) notify(self, report.job_id, "");
  // For the metrics: the current attempt's newest report (on_progress ignores a zombie's).
  if (const auto* r = logic.find(report.job_id); r != nullptr && report.attempt == r->attempts - 1)
    self->state.output.add_progress(report);
  // A preempted attempt whose emergency checkpoint committed, or that cannot save one before the
  // deadline, is stopped now.
  if (logic.emergency_checkpoint_committed(report.job_id) ||
      logic.emergency_checkpoint_declined(report.job_id))
    end_preemption(self, report.job_id);
  // A growing attempt whose checkpoint committed restarts on more workers.
  if (logic.resize_checkpoint_committed(report.job_id)) end_resize(self, report.job_id);
}

// Keeps a line of output: with a store it lives there (logs_query reads it back, through the
// writer, so after this line); without, in memory. The trainer `sender` hears that the line was
// kept (log_ack) once it is written; a line not written stays with the trainer for the next head.
// False when the store writer would not take it.
bool keep_log_line(head_ptr self, const log_line& line, const caf::actor& sender) {
  auto& st = self->state;
  // Every line up to the acknowledged one is stored (or written before this one is).
  const auto ack = log_ack{line.job_id, line.attempt, st.output.stored_lines().through_after(line)};
  const bool numbered = line.seq > 0;
  if (st.store_writer) {
    const bool handed =
        store_write(self, "record worker output", store_log_lines{0, line.job_id, {line}}, [=] {
          if (numbered && sender) command(self, sender, ack);
        });
    if (!handed) return false;
    st.output.stored_lines().stored(line);  // a copy sent again meanwhile is not written twice
    return true;
  }
  st.output.keep_in_memory(line);
  if (numbered) {
    st.output.stored_lines().stored(line);
    if (sender) command(self, sender, ack);
  }
  return true;
}

void on_log_line(head_ptr self, const log_line& line) {
  auto& st = self->state;
  const auto sender = caf::actor_cast<caf::actor>(self->current_sender());
  auto& stored = st.output.stored_lines();
  if (!stored.is_new(line)) {  // sent again (a failover, a lost link); kept already (or handed over)
    const auto ack = log_ack{line.job_id, line.attempt, stored.through(line.job_id, line.attempt)};
    if (sender) after_store_writes(self, [=] { command(self, sender, ack); });
    return;
  }
  if (!keep_log_line(self, line, sender)) return;
  notify(self, line.job_id,
         "(worker rank=" + std::to_string(line.rank) + " node=" + line.node +
             " pid=" + std::to_string(line.pid) + ") " + line.text);
}

// How an attempt ended. The trainer keeps its outcome until told it was taken, once it is in the
// store (a repeat of an outcome already taken is acknowledged too; one of a job this store does
// not know is acknowledged at once, so that its trainer ends).
void on_attempt_outcome(head_ptr self, const attempt_outcome& outcome) {
  const auto trainer = caf::actor_cast<caf::actor>(self->current_sender());
  const outcome_ack ack{outcome.job_id, outcome.attempt};
  if (self->state.logic.find(outcome.job_id) == nullptr) {
    if (trainer) command(self, trainer, ack);
    return;
  }
  forget_trainer(self, outcome.job_id, outcome.attempt);
  self->state.output.stored_lines().forget(outcome.job_id, outcome.attempt);
  self->state.logic.on_outcome(outcome);
  notify_state(self, outcome.job_id);
  start_trainers(self);
  if (trainer) after_store_writes(self, [=] { command(self, trainer, ack); });
}

}  // namespace

caf::behavior head_actor(head_ptr self, head_options options) {
  self->state.options = std::move(options);
  // The lease was taken (or renewed) just before the actor started.
  self->state.lease = leader_session(self->state.options.lease_ttl, steady::now());
  start_store_actors(self);
  if (self->state.options.store) arm_lease_deadline(self);
  reserve_job_id(self);
  self->set_down_handler([=](caf::down_msg& msg) { on_down(self, msg); });
  return client_handlers(self, client_calls{})
      .or_else([=](const node_hello& m) { on_node_hello(self, m); },
               [=](const node_draining& m) { on_node_draining(self, m); },
               [=](const process_silent& m) { on_process_silent(self, m); },
               [=](const preemption_deadline& m) { on_preemption_deadline(self, m); },
               [=](const trainer_started& m) { on_trainer_started(self, m); },
               [=](adoption_deadline) { on_adoption_deadline(self); },
               [=](resize_due) {
                 grow_jobs(self);
                 persist(self);
               },
               [=](lease_deadline) { on_lease_deadline(self); },
               [=](const metrics_query&) { return on_metrics_query(self); },
               [=](const job_history_query& q) { return on_job_history_query(self, q); },
               [=](const publish_address& m) { on_publish_address(self, m); },
               [=](const lease_renewal& r) {
                 if (!self->state.lease.ended())
                   renewal(self, steady::time_point(std::chrono::nanoseconds(r.started_ns)), r.renewed,
                           r.error);
               },
               [=](const attempt_running& m) { on_attempt_running(self, m); },
               [=](const progress_report& m) { on_progress(self, m); },
               [=](const log_line& m) { on_log_line(self, m); },
               [=](const attempt_outcome& m) { on_attempt_outcome(self, m); });
}

std::string describe(caf::actor_system& sys, const caf::error& err) {
  if (!err) return "no error";
  const auto& ctx = err.context();
  if (ctx.match_elements<std::string>()) return ctx.get_as<std::string>(0);
  if (err == caf::exit_reason::kill) return "killed";
  if (err == caf::exit_reason::user_shutdown) return "shut down on request";
  return sys.render(err);
}

}  // namespace cohort::actors
