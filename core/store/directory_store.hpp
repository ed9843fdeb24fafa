// The directory backend of the cluster store: all cluster and job state of a head, as files in
// one directory on shared storage (NFS in production), so a restarted or standby head recovers
// the job table from it.
// Layout (see store_paths.hpp): cluster/{leader.json, epochs/, next_job_id, credentials.json},
// jobs/<id>/{spec.json, state.json, events.jsonl, logs.jsonl, logs.1.jsonl}, nodes/<name>.json.
// Every mutation takes the writer's lease epoch and is refused (store_error kind fenced) unless it
// is the current epoch (see leader_lease.hpp for the one-write race that remains).
// Not thread-safe: one owner per object (the head actor); separate objects, processes and hosts
// coordinate through the files.
#pragma once

#include <filesystem>
#include <map>

#include "core/store/store_backend.hpp"

namespace cohort::core::store {

class directory_store : public store_backend {
 public:
  // Opens (creating the directories of) the store at `dir`.
  explicit directory_store(std::filesystem::path dir, store_options options = {},
                           clock_ms now = system_clock_ms);

  const std::filesystem::path& dir() const { return dir_; }
  const store_options& options() const override { return options_; }
  const clock_ms& clock() const override { return now_; }
  std::string location() const override { return dir_.string(); }
  // The leader lease of this store (same clock); what fence checks compare against.
  leader_lease& lease() override { return lease_; }
  const leader_lease& lease() const override { return lease_; }

  // Ids "job-0001", ...; creates jobs/<id>/ and writes spec.json verbatim.
  std::string create_job(std::int64_t epoch, const std::string& spec_json) override;
  // Creates jobs/<id>/ (empty); create_reserved_job writes its spec.json.
  std::string reserve_job_id(std::int64_t epoch) override;
  void create_reserved_job(std::int64_t epoch, const std::string& job_id,
                           const std::string& spec_json) override;
  // Replaces state.json (atomically).
  void write_state(std::int64_t epoch, const std::string& job_id,
                   const nlohmann::json& state) override;
  // Appends to events.jsonl; fsynced.
  void append_event(std::int64_t epoch, const std::string& job_id, nlohmann::json event) override;
  // Appends to logs.jsonl; not fsynced (a crash may lose the last lines, never tear earlier
  // ones). Rotates to logs.1.jsonl past log_file_cap_bytes.
  void append_logs(std::int64_t epoch, const std::string& job_id,
                   std::vector<nlohmann::json> lines) override;

  // A job whose directory exists but has no spec.json (a crash inside create_job) is skipped.
  // Corrupt files throw store_error corrupt.
  std::vector<stored_job> list_jobs() const override;
  std::optional<stored_job> load_job(const std::string& job_id) const override;
  std::vector<nlohmann::json> read_events(const std::string& job_id) const override;
  // From logs.1.jsonl, then logs.jsonl.
  std::vector<nlohmann::json> read_logs(const std::string& job_id,
                                        std::int64_t after_seq = 0) const override;

  // nodes/<name>.json.
  void write_node(std::int64_t epoch, const std::string& name,
                  const nlohmann::json& node) override;
  void remove_node(std::int64_t epoch, const std::string& name) override;
  std::vector<nlohmann::json> list_nodes() const override;

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
