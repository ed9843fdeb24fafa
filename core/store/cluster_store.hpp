// The cluster store: all cluster and job state of a head, as files in one directory on shared
// storage (NFS in production), so a restarted or standby head recovers the job table from it.
// Layout (see store_paths.hpp): cluster/{leader.json, epochs/, next_job_id, credentials.json},
// jobs/<id>/{spec.json, state.json, events.jsonl, logs.jsonl, logs.1.jsonl}, nodes/<name>.json.
// Every mutation takes the writer's lease epoch and is refused (store_error kind fenced) unless it
// is the current epoch (see leader_lease.hpp for the one-write race that remains).
// Not thread-safe: one owner per object (the head actor); separate objects, processes and hosts
// coordinate through the files.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/store/leader_lease.hpp"

namespace cohort::core::store {

struct store_options {
  // logs.jsonl is rotated to logs.1.jsonl (replacing the previous one) once it passes this size,
  // so a job keeps at most about twice this much output; the oldest lines go first.
  std::uint64_t log_file_cap_bytes = 8u << 20;
  // A log line's "line" text longer than this is cut (at a UTF-8 boundary) and marked
  // "truncated": true.
  std::size_t log_line_cap_bytes = 16u << 10;
};

struct stored_job {
  std::string id;
  std::string spec_json;  // the spec exactly as submitted
  std::optional<nlohmann::json>
      state;  // the last write_state (with "epoch"); none before the first
};

class cluster_store {
 public:
  // Opens (creating the directories of) the store at `dir`.
  explicit cluster_store(std::filesystem::path dir, store_options options = {},
                         clock_ms now = system_clock_ms);

  const std::filesystem::path& dir() const { return dir_; }
  // What this object was opened with: another object on the same directory (another thread's
  // owner) opens it the same way.
  const store_options& options() const { return options_; }
  const clock_ms& clock() const { return now_; }
  // The leader lease of this store (same clock); what fence checks compare against.
  leader_lease& lease() { return lease_; }
  const leader_lease& lease() const { return lease_; }

  // Accepts a job: allocates the next id ("job-0001", ...; never reused, also across restarts
  // and store objects), creates jobs/<id>/ and writes spec.json verbatim. `spec_json` must be a
  // JSON object (store_error invalid otherwise).
  std::string create_job(std::int64_t epoch, const std::string& spec_json);
  // Replaces state.json with `state` (a JSON object, the head's job record) plus "epoch".
  void write_state(std::int64_t epoch, const std::string& job_id, const nlohmann::json& state);
  // Appends one history line (a JSON object, e.g. {"state": "RUNNING", "reason": ...}) to
  // events.jsonl with "ts" (unix ms, unless given) and "epoch"; fsynced.
  void append_event(std::int64_t epoch, const std::string& job_id, nlohmann::json event);
  // Appends worker output lines (JSON objects, e.g. {"rank", "node", "pid", "line"}) to
  // logs.jsonl with "seq" (1, 2, ... per job, across rotations and restarts) and "ts"; not
  // fsynced (a crash may lose the last lines, never tear earlier ones). Applies the size caps.
  void append_logs(std::int64_t epoch, const std::string& job_id,
                   std::vector<nlohmann::json> lines);

  // Every accepted job, sorted by id (job-2 before job-10). A job whose directory exists but has
  // no spec.json (a crash inside create_job) is skipped. Corrupt files throw store_error corrupt.
  std::vector<stored_job> list_jobs() const;
  std::optional<stored_job> load_job(const std::string& job_id) const;
  std::vector<nlohmann::json> read_events(const std::string& job_id) const;
  // Log lines with seq > after_seq, oldest first (from logs.1.jsonl, then logs.jsonl).
  std::vector<nlohmann::json> read_logs(const std::string& job_id,
                                        std::int64_t after_seq = 0) const;

  // Last-known nodes, for display: nodes/<name>.json holds `node` (a JSON object) plus "epoch"
  // and "updated_at" (unix ms).
  void write_node(std::int64_t epoch, const std::string& name, const nlohmann::json& node);
  // Forgets a node; no error when it was not recorded.
  void remove_node(std::int64_t epoch, const std::string& name);
  // Sorted by name.
  std::vector<nlohmann::json> list_nodes() const;

 private:
  // Throws store_error fenced when `epoch` is older than the current lease epoch, invalid when
  // it is newer (never claimed).
  void check_epoch(std::int64_t epoch) const;
  std::filesystem::path existing_job_dir(const std::string& job_id) const;
  std::int64_t next_log_seq(const std::string& job_id, const std::filesystem::path& dir);

  std::filesystem::path dir_;
  store_options options_;
  clock_ms now_;
  leader_lease lease_;
  std::map<std::string, std::int64_t> last_log_seq_;  // per job, read from the files once
};

}  // namespace cohort::core::store
