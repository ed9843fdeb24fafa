// The embedded cluster (see local_cluster.hpp): blocking calls through a scoped actor.
#include "actors/local_cluster.hpp"

#include <algorithm>

#include <caf/all.hpp>

#include "actors/client_protocol.hpp"
#include "actors/head_actor.hpp"
#include "actors/node_actor.hpp"
#include "actors/worker_actor.hpp"
#include "actors/worker_process_actor.hpp"

namespace cohort::actors {

namespace {
constexpr auto request_timeout = std::chrono::seconds(30);
}

struct local_cluster::impl {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::actor head;
  std::map<std::string, caf::actor> nodes;
  std::shared_ptr<local_node_directory> directory = std::make_shared<local_node_directory>();
  std::shared_ptr<runner_registry> runners = std::make_shared<runner_registry>();
  std::string worker_program;  // "": workers on threads of this process

  // A request of client_calls (client_protocol.hpp), answered with the reply the table names.
  template <class Request>
  reply_to<Request> ask(const Request& req) {
    using T = reply_to<Request>;
    caf::scoped_actor self{*sys};
    T out{};
    std::string failure;
    self->request(head, request_timeout, req)
        .receive([&](T& x) { out = std::move(x); },
                 [&](caf::error& err) { failure = describe(*sys, err); });
    if (!failure.empty()) throw cluster_error(failure);
    return out;
  }

  // Follows a job: calls keep_going for the current record and every event until it returns
  // false or the timeout passes. Returns the last record seen.
  job_record follow(const std::string& job_id, std::chrono::milliseconds timeout,
                    const std::function<bool(const job_event&)>& keep_going) {
    caf::scoped_actor self{*sys};
    job_record last;
    std::string failure;
    self->request(head, request_timeout, follow_job{job_id})
        .receive([&](job_record& r) { last = std::move(r); },
                 [&](caf::error& err) { failure = describe(*sys, err); });
    if (!failure.empty()) throw cluster_error(failure);
    if (!keep_going(job_event{last, ""})) return last;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return last;
      bool go_on = true;
      bool timed_out = false;
      self->receive(
          [&](job_event& e) {
            last = e.record;
            go_on = keep_going(e);
          },
          caf::after(left) >> [&] { timed_out = true; });
      if (timed_out || !go_on) return last;
    }
  }

  // How the node `info` runs its workers: processes of worker_program, told the node's GPUs as
  // cluster-worker tells them, or threads.
  worker_spawner workers_for(const node_info& info) const {
    if (worker_program.empty()) return in_process_workers(runners);
    const auto gpus = info.resources.find("GPU");
    const auto offered = gpus == info.resources.end() ? 0 : static_cast<std::int32_t>(gpus->second);
    return process_workers(worker_program, info.gpu_ids,
                           std::max(offered, static_cast<std::int32_t>(info.gpu_ids.size())));
  }

  void spawn_node(const node_info& info) {
    if (nodes.count(info.name) != 0) throw cluster_error("a node named " + info.name + " exists");
    auto node = sys->spawn(node_actor, info, head, directory, workers_for(info),
                           std::make_shared<epoch_fence>());
    nodes[info.name] = node;
    directory->put(info.name, node);
    // The node introduces itself with a plain send once it starts; a round trip through the node
    // and then the head orders the caller after that introduction.
    caf::scoped_actor self{*sys};
    self->request(node, request_timeout, node_ping{})
        .receive([](bool) {}, [](caf::error&) {});
    self->request(head, request_timeout, job_list_query{})
        .receive([](job_list&) {}, [](caf::error&) {});
  }
};

local_cluster::local_cluster(const std::vector<node_info>& nodes, std::string worker_program)
    : impl_(std::make_unique<impl>()) {
  impl_->worker_program = std::move(worker_program);
  impl_->sys = std::make_unique<caf::actor_system>(impl_->cfg);
  impl_->head = impl_->sys->spawn(head_actor, head_options{});
  for (const auto& n : nodes) impl_->spawn_node(n);
}

local_cluster::~local_cluster() {
  for (auto& [name, node] : impl_->nodes) caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(impl_->head, caf::exit_reason::user_shutdown);
  impl_->runners->cancel_and_join_all();
  impl_->sys->await_all_actors_done();
}

std::string local_cluster::submit(const std::string& spec_json) {
  return impl_->ask(submit_job{spec_json}).job_id;
}

job_record local_cluster::status(const std::string& job_id) {
  return impl_->ask(job_query{job_id});
}

std::vector<job_record> local_cluster::list() {
  return impl_->ask(job_list_query{}).jobs;
}

std::vector<log_line> local_cluster::logs(const std::string& job_id) {
  return impl_->ask(logs_query{job_id}).lines;
}

job_record local_cluster::stop(const std::string& job_id) {
  return impl_->ask(stop_job{job_id});
}

job_record local_cluster::release(const std::string& job_id) {
  return impl_->ask(release_job{job_id});
}

job_record local_cluster::follow(const std::string& job_id, std::chrono::milliseconds timeout,
                                 const std::function<void(const job_event&)>& on_event) {
  return impl_->follow(job_id, timeout, [&](const job_event& e) {
    if (on_event) on_event(e);
    return !is_terminal(e.record.state);
  });
}

job_record local_cluster::wait_until(const std::string& job_id,
                                     const std::function<bool(const job_record&)>& pred,
                                     std::chrono::milliseconds timeout) {
  bool met = false;
  auto last = impl_->follow(job_id, timeout, [&](const job_event& e) {
    met = pred(e.record);
    return !met && !is_terminal(e.record.state);
  });
  if (met) return last;
  throw cluster_error("job " + job_id + " did not reach the awaited state; last state " +
                      to_string(last.state) + ": " + last.reason);
}

void local_cluster::add_node(const node_info& node) { impl_->spawn_node(node); }

void local_cluster::kill_node(const std::string& name) {
  auto it = impl_->nodes.find(name);
  if (it == impl_->nodes.end()) throw cluster_error("no node named " + name);
  caf::scoped_actor self{*impl_->sys};
  self->monitor(it->second);
  self->send_exit(it->second, caf::exit_reason::kill);
  self->receive([](caf::down_msg&) {});
  impl_->directory->remove(name);
  impl_->nodes.erase(it);
}

bool local_cluster::kill_worker(const std::string& job_id, int rank) {
  for (auto& [name, node] : impl_->nodes) {
    caf::scoped_actor self{*impl_->sys};
    bool killed = false;
    self->request(node, request_timeout, kill_worker_drill{job_id, static_cast<std::int32_t>(rank)})
        .receive([&](bool k) { killed = k; }, [](caf::error&) {});
    if (killed) return true;
  }
  return false;
}

bool local_cluster::kill_trainer(const std::string& job_id) {
  for (auto& [name, node] : impl_->nodes) {
    caf::scoped_actor self{*impl_->sys};
    bool killed = false;
    self->request(node, request_timeout, kill_trainer_drill{job_id})
        .receive([&](bool k) { killed = k; }, [](caf::error&) {});
    if (killed) return true;
  }
  return false;
}

std::vector<std::string> local_cluster::node_names() const {
  std::vector<std::string> out;
  for (const auto& [name, node] : impl_->nodes) out.push_back(name);
  return out;
}

}  // namespace cohort::actors
