// Job ids of the cluster store ("job-0001", ...) and their allocation: ids are never reused, also
// across head restarts, store objects in one process, and processes on one host or over NFS.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "core/store/posix_io.hpp"

namespace cohort::core::store {

// "job-0001" for 1; numbers past 9999 just grow ("job-10000").
std::string format_job_id(std::int64_t number);
// The number of a "job-<digits>" id; nullopt for any other name.
std::optional<std::int64_t> parse_job_id(const std::string& job_id);
// Orders ids by number (job-2 before job-10); other names after them, by name.
bool job_id_less(const std::string& a, const std::string& b);

// The store's id lock: an open-file-description lock on cluster/next_job_id.lock (released when
// the holder closes or dies, so a crash leaves no stale lock; works between threads, processes
// and, through the NFS lock manager, hosts). Under it, take_next() picks
// max(cluster/next_job_id, highest existing job directory + 1) and creates jobs/<id>/ with mkdir,
// which fails on an existing directory, so even a writer without the lock never gets a used id.
class job_id_lock {
 public:
  explicit job_id_lock(const std::filesystem::path& store_dir);
  job_id_lock(const job_id_lock&) = delete;
  job_id_lock& operator=(const job_id_lock&) = delete;
  // Creates the next job directory; returns its id.
  std::string take_next();
  // Records in cluster/next_job_id that ids up to the last taken one are used.
  void commit();

 private:
  std::filesystem::path store_dir_;
  unique_fd fd_;
  std::int64_t taken_ = 0;
};

}  // namespace cohort::core::store
