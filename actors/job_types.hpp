// Plain records that describe jobs, nodes and attempts. Each is declared once, with one field list
// (its inspect function) that drives CAF messages in-process and the msgpack wire between
// processes. Only CAF's tiny meta::type_name header is pulled in.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

namespace cohort::actors {

enum class job_state : std::uint8_t { pending, running, restarting, succeeded, failed, stopped };

const char* to_string(job_state s);
bool is_terminal(job_state s);

// Why an attempt ended: which rank on which node, and what happened. rank -1: the trainer itself
// or the whole node.
struct failure_cause {
  std::int32_t attempt = 0;
  std::int32_t rank = -1;
  std::string node;
  std::string reason;
};

// The head's view of one job; what `submit status` shows.
struct job_record {
  std::string id;
  std::string name;
  job_state state = job_state::pending;
  std::string reason;
  std::int32_t attempts = 0;  // attempts started (1 after the first start)
  std::vector<failure_cause> failures;
  std::string trainer_node;
  std::vector<std::string> rank_nodes;
  std::int64_t step = 0;
  std::int64_t total_steps = 0;
  double loss = 0;
  std::string spec_json;
};

// A node as it registers: name and total resources.
struct node_info {
  std::string name;
  std::map<std::string, double> resources;
};

// What the head gives a trainer: one attempt of one job, placed.
struct trainer_setup {
  std::string job_id;
  std::string spec_json;
  std::int32_t attempt = 0;
  std::string trainer_node;
  std::vector<std::string> rank_nodes;
};

// What a trainer gives a node to start one worker.
struct worker_setup {
  std::string job_id;
  std::string spec_json;
  std::int32_t rank = 0;
  std::int32_t world_size = 1;
  std::int32_t attempt = 0;
  std::string node;
  std::string store_address;
};

// A step report from a worker (rank 0's carry the metrics).
struct progress_report {
  std::string job_id;
  std::int32_t rank = 0;
  std::int64_t step = 0;
  std::int64_t total_steps = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;
  double mfu = 0;
};

// How an attempt ended, as the trainer tells the head.
struct attempt_outcome {
  std::string job_id;
  std::int32_t attempt = 0;
  bool succeeded = false;
  failure_cause cause;  // when !succeeded
};

// One line of worker output, prefixed with where it came from when shown.
struct log_line {
  std::string job_id;
  std::int32_t rank = 0;
  std::string node;
  std::int64_t pid = 0;
  std::string text;
};

// What followers of a job receive: the record after a change, and optionally a line to show.
struct job_event {
  job_record record;
  std::string line;
};

// The field lists: one per record, in wire order.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, failure_cause& x) {
  return f(caf::meta::type_name("failure_cause"), x.attempt, x.rank, x.node, x.reason);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_record& x) {
  return f(caf::meta::type_name("job_record"), x.id, x.name, x.state, x.reason, x.attempts, x.failures, x.trainer_node, x.rank_nodes, x.step, x.total_steps, x.loss, x.spec_json);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_info& x) {
  return f(caf::meta::type_name("node_info"), x.name, x.resources);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, trainer_setup& x) {
  return f(caf::meta::type_name("trainer_setup"), x.job_id, x.spec_json, x.attempt, x.trainer_node, x.rank_nodes);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, worker_setup& x) {
  return f(caf::meta::type_name("worker_setup"), x.job_id, x.spec_json, x.rank, x.world_size, x.attempt, x.node, x.store_address);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, progress_report& x) {
  return f(caf::meta::type_name("progress_report"), x.job_id, x.rank, x.step, x.total_steps, x.loss, x.lr, x.grad_norm, x.tokens_per_s, x.mfu);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, attempt_outcome& x) {
  return f(caf::meta::type_name("attempt_outcome"), x.job_id, x.attempt, x.succeeded, x.cause);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, log_line& x) {
  return f(caf::meta::type_name("log_line"), x.job_id, x.rank, x.node, x.pid, x.text);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_event& x) {
  return f(caf::meta::type_name("job_event"), x.record, x.line);
}

}  // namespace cohort::actors
