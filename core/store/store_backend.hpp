// The interface of a cluster store backend: what a head writes and reads of the cluster and its
// jobs, whatever keeps it. Two backends: a directory on shared storage (directory_store.hpp, the
// default) and etcd (etcd_store.hpp). cluster_store.hpp is the handle the head holds.
//
// The contract every backend keeps (tests/core/store/store_contract_test.cpp checks both):
//  - Every mutation takes the writer's lease epoch. A write of an epoch older than the current
//    one is refused with store_error fenced; one of an epoch never claimed with invalid. Epoch 0
//    is accepted only while no head ever held the lease.
//  - Job ids ("job-0001", ...) come from a counter and are never reused, across store objects,
//    processes and hosts.
//  - A job's logs and history are bounded (store_options); the oldest lines go first.
//  - Reads never need the lease.
// Not thread-safe: one owner per object; separate objects coordinate through the backend.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/store/leader_lease.hpp"

namespace cohort::core::store {

struct store_options {
  // Directory: logs.jsonl is rotated to logs.1.jsonl (replacing the previous one) once it passes
  // this size, so a job keeps at most about twice this much output; the oldest lines go first.
  std::uint64_t log_file_cap_bytes = 8u << 20;
  // A log line's "line" text longer than this is cut (at a UTF-8 boundary) and marked
  // "truncated": true.
  std::size_t log_line_cap_bytes = 16u << 10;
  // etcd: a job keeps its newest this many log lines (each at most log_line_cap_bytes), and its
  // newest this many history lines (the directory keeps all of its history).
  std::int64_t etcd_log_lines_kept = 20000;
  std::int64_t etcd_events_kept = 10000;
};

struct stored_job {
  std::string id;
  std::string spec_json;  // the spec exactly as submitted
  std::optional<nlohmann::json>
      state;  // the last write_state (with "epoch"); none before the first
};

class store_backend {
 public:
  virtual ~store_backend() = default;

  // Where the store lives, for messages ("/shared/store", "etcd://h1:2379/cohort").
  virtual std::string location() const = 0;
  // What the backend was opened with.
  virtual const store_options& options() const = 0;
  virtual const clock_ms& clock() const = 0;
  virtual lease_service& lease() = 0;
  virtual const lease_service& lease() const = 0;

  // Accepts a job: allocates the next id, stores `spec_json` verbatim (a JSON object, else
  // store_error invalid) and returns the id.
  virtual std::string create_job(std::int64_t epoch, const std::string& spec_json) = 0;
  // The same in two steps, so that a head can take an id before a job comes and accept the job
  // without waiting for the store (it keeps one id ready): reserve_job_id takes the next id,
  // never handed out again whether or not a spec follows (a head that stops leaves its unused id
  // as a gap); create_reserved_job then stores the spec verbatim under it. Until then list_jobs
  // and load_job do not show the id, and write_state refuses it. store_error invalid for a spec
  // that is not a JSON object, an id that was not reserved, or one that has a spec already.
  virtual std::string reserve_job_id(std::int64_t epoch) = 0;
  virtual void create_reserved_job(std::int64_t epoch, const std::string& job_id,
                                   const std::string& spec_json) = 0;
  // Replaces the job's state with `state` (a JSON object, the head's job record) plus "epoch".
  virtual void write_state(std::int64_t epoch, const std::string& job_id,
                           const nlohmann::json& state) = 0;
  // Appends one history line (a JSON object) with "ts" (unix ms, unless given) and "epoch";
  // durable when this returns.
  virtual void append_event(std::int64_t epoch, const std::string& job_id,
                            nlohmann::json event) = 0;
  // Appends worker output lines (JSON objects) with "seq" (1, 2, ... per job, across restarts)
  // and "ts"; applies the size caps.
  virtual void append_logs(std::int64_t epoch, const std::string& job_id,
                           std::vector<nlohmann::json> lines) = 0;

  // Every accepted job, sorted by id (job-2 before job-10).
  virtual std::vector<stored_job> list_jobs() const = 0;
  virtual std::optional<stored_job> load_job(const std::string& job_id) const = 0;
  virtual std::vector<nlohmann::json> read_events(const std::string& job_id) const = 0;
  // Log lines with seq > after_seq, oldest first.
  virtual std::vector<nlohmann::json> read_logs(const std::string& job_id,
                                                std::int64_t after_seq) const = 0;

  // Last-known nodes: `node` (a JSON object) plus "epoch" and "updated_at" (unix ms).
  virtual void write_node(std::int64_t epoch, const std::string& name,
                          const nlohmann::json& node) = 0;
  // Forgets a node; no error when it was not recorded.
  virtual void remove_node(std::int64_t epoch, const std::string& name) = 0;
  // Sorted by name.
  virtual std::vector<nlohmann::json> list_nodes() const = 0;
};

}  // namespace cohort::core::store
