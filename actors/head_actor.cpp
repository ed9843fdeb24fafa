// The head actor: registers nodes, accepts jobs, places them, starts each attempt's trainer on
// rank 0's node, and applies the failure policy when an attempt ends (logic in head_state).
#include <caf/all.hpp>

#include "actors/actor_system_types.hpp"
#include "config/job_spec.hpp"

namespace cohort::actors {

namespace {

using head_ptr = caf::stateful_actor<head_actor_state>*;

void notify(head_ptr self, const std::string& job_id, const std::string& line) {
  auto it = self->state.followers.find(job_id);
  const auto* record = self->state.logic.find(job_id);
  if (it == self->state.followers.end() || record == nullptr) return;
  for (auto& f : it->second) self->send(f, event_atom::value, job_event{*record, line});
  if (is_terminal(record->state)) self->state.followers.erase(it);
}

void start_trainers(head_ptr self);

void trainer_lost(head_ptr self, const caf::actor_addr& addr, const std::string& reason) {
  auto it = self->state.trainers.find(addr);
  if (it == self->state.trainers.end()) return;
  auto ref = it->second;
  self->state.trainers.erase(it);
  auto t = self->state.trainer_of_job.find(ref.job_id);
  if (t != self->state.trainer_of_job.end() && t->second.address() == addr)
    self->state.trainer_of_job.erase(t);
  const auto& record = self->state.logic.on_trainer_lost(ref.job_id, ref.attempt, reason);
  notify(self, ref.job_id, std::string(to_string(record.state)) + ": " + record.reason);
  start_trainers(self);
}

void start_trainers(head_ptr self) {
  for (auto& setup : self->state.logic.schedule()) {
    notify(self, setup.job_id, "placed: trainer on " + setup.trainer_node + ", attempt " +
                                   std::to_string(setup.attempt + 1));
    std::vector<caf::actor> rank_nodes;
    for (const auto& name : setup.rank_nodes) rank_nodes.push_back(self->state.node_actors[name]);
    auto node = self->state.node_actors[setup.trainer_node];
    self->request(node, caf::infinite, spawn_trainer_atom::value, setup, rank_nodes)
        .then(
            [=](caf::actor& trainer) {
              self->monitor(trainer);
              self->state.trainers[trainer.address()] = {setup.job_id, setup.attempt};
              self->state.trainer_of_job[setup.job_id] = trainer;
            },
            [=](caf::error& err) {
              const auto& record = self->state.logic.on_trainer_lost(
                  setup.job_id, setup.attempt,
                  "could not start the trainer on node " + setup.trainer_node + ": " +
                      describe(self->system(), err));
              notify(self, setup.job_id, std::string(to_string(record.state)) + ": " +
                                             record.reason);
              start_trainers(self);
            });
  }
}

}  // namespace

caf::behavior head_actor(head_ptr self) {
  self->set_down_handler([=](caf::down_msg& msg) {
    auto node = self->state.node_by_addr.find(msg.source);
    if (node != self->state.node_by_addr.end()) {
      auto name = node->second;
      self->state.node_by_addr.erase(node);
      self->state.node_actors.erase(name);
      self->state.logic.remove_node(name);
      return;
    }
    trainer_lost(self, msg.source,
                 msg.reason ? "trainer died: " + describe(self->system(), msg.reason)
                            : "trainer exited without reporting an outcome");
  });
  return {
      [=](register_atom, const node_info& info) {
        auto sender = caf::actor_cast<caf::actor>(self->current_sender());
        if (auto old = self->state.node_actors.find(info.name);
            old != self->state.node_actors.end() && old->second != sender) {
          self->state.node_by_addr.erase(old->second.address());
          self->demonitor(old->second);
        }
        self->monitor(sender);
        self->state.node_actors[info.name] = sender;
        self->state.node_by_addr[sender.address()] = info.name;
        self->state.logic.add_node(info);
        start_trainers(self);
        return caf::unit;
      },
      [=](submit_atom, const std::string& spec_json) -> caf::result<std::string> {
        config::job_spec spec;
        try {
          spec = config::parse_job_spec(spec_json);
        } catch (const std::exception& e) {
          return caf::make_error(caf::sec::invalid_argument, std::string(e.what()));
        }
        auto id = self->state.logic.submit(spec, config::to_json_text(spec));
        start_trainers(self);
        return id;
      },
      [=](status_atom, const std::string& id) -> caf::result<job_record> {
        if (const auto* r = self->state.logic.find(id)) return *r;
        return caf::make_error(caf::sec::invalid_argument, "no job with id " + id);
      },
      [=](list_atom) { return self->state.logic.jobs(); },
      [=](stop_atom, const std::string& id) -> caf::result<job_record> {
        if (self->state.logic.find(id) == nullptr)
          return caf::make_error(caf::sec::invalid_argument, "no job with id " + id);
        if (self->state.logic.stop(id, "stopped on request")) {
          auto t = self->state.trainer_of_job.find(id);
          if (t != self->state.trainer_of_job.end()) {
            self->state.trainers.erase(t->second.address());
            self->send_exit(t->second, caf::exit_reason::user_shutdown);
            self->state.trainer_of_job.erase(t);
          }
          notify(self, id, "STOPPED: stopped on request");
          start_trainers(self);
        }
        return *self->state.logic.find(id);
      },
      [=](follow_atom, const std::string& id) -> caf::result<job_record> {
        const auto* r = self->state.logic.find(id);
        if (r == nullptr) return caf::make_error(caf::sec::invalid_argument, "no job with id " + id);
        if (!is_terminal(r->state))
          self->state.followers[id].push_back(
              caf::actor_cast<caf::actor>(self->current_sender()));
        return *r;
      },
      [=](logs_atom, const std::string& id) -> caf::result<std::vector<log_line>> {
        if (self->state.logic.find(id) == nullptr)
          return caf::make_error(caf::sec::invalid_argument, "no job with id " + id);
        return self->state.logs[id];
      },
      [=](running_atom, const std::string& id, std::int32_t attempt) {
        self->state.logic.on_running(id, attempt);
        const auto* r = self->state.logic.find(id);
        if (r != nullptr && r->state == job_state::running)
          notify(self, id, std::string("RUNNING: ") + r->reason);
      },
      [=](progress_atom, const progress_report& report) {
        self->state.logic.on_progress(report);
        notify(self, report.job_id, "");
      },
      [=](log_atom, const log_line& line) {
        auto& lines = self->state.logs[line.job_id];
        if (lines.size() >= max_log_lines_per_job) lines.erase(lines.begin());
        lines.push_back(line);
        notify(self, line.job_id,
               "(worker rank=" + std::to_string(line.rank) + " node=" + line.node +
                   " pid=" + std::to_string(line.pid) + ") " + line.text);
      },
      [=](outcome_atom, const attempt_outcome& outcome) {
        auto t = self->state.trainer_of_job.find(outcome.job_id);
        if (t != self->state.trainer_of_job.end()) {
          self->state.trainers.erase(t->second.address());
          self->state.trainer_of_job.erase(t);
        }
        const auto& record = self->state.logic.on_outcome(outcome);
        notify(self, outcome.job_id, std::string(to_string(record.state)) + ": " + record.reason);
        start_trainers(self);
      },
  };
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
