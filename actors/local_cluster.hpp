// An embedded cluster in one process: a head and any number of nodes in one CAF actor system.
// `submit --local` runs jobs on it with every worker in a cohort-worker process of its own (as a
// cluster-worker runs them), and the actor tests drive it as a user would (submit, follow, stop),
// with workers on threads of this process, plus failure drills (kill a worker, kill a node, add a
// node). CAF stays behind a pimpl.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "actors/messages.hpp"

namespace cohort::actors {

class cluster_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class local_cluster {
 public:
  // `worker_program`: the program each worker runs in an OS process of its own (cohort-worker),
  // started as a cluster-worker starts it (CUDA_VISIBLE_DEVICES from the node's gpu_ids, the
  // job's runtime_env.env_vars, the worker link on fds 3 and 4); "" runs each worker's workload on
  // a thread of this process instead.
  explicit local_cluster(const std::vector<node_info>& nodes, std::string worker_program = {});
  ~local_cluster();
  local_cluster(const local_cluster&) = delete;
  local_cluster& operator=(const local_cluster&) = delete;

  // Submits a job spec (JSON text); returns its id. A rejected spec throws cluster_error with
  // the validation message.
  std::string submit(const std::string& spec_json);
  job_record status(const std::string& job_id);
  std::vector<job_record> list();
  std::vector<log_line> logs(const std::string& job_id);
  job_record stop(const std::string& job_id);
  // Lets a job held at run.hold_before_step go on (`submit release`); throws cluster_error with
  // the head's refusal.
  job_record release(const std::string& job_id);

  // Follows a job until it ends or the timeout passes; calls on_event for every change. Returns
  // the last record seen (check its state: not terminal means the timeout passed).
  job_record follow(const std::string& job_id, std::chrono::milliseconds timeout,
                    const std::function<void(const job_event&)>& on_event = {});
  // Waits until pred(record) holds; returns the record, or throws cluster_error on timeout.
  job_record wait_until(const std::string& job_id,
                        const std::function<bool(const job_record&)>& pred,
                        std::chrono::milliseconds timeout);

  // Failure drills and elasticity.
  void add_node(const node_info& node);
  void kill_node(const std::string& name);
  bool kill_worker(const std::string& job_id, int rank);
  bool kill_trainer(const std::string& job_id);
  std::vector<std::string> node_names() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace cohort::actors
