// Where everything lives inside a cluster store directory, in one place, and the check that keeps
// names used as path components (job ids, node names) from escaping the store.
#pragma once

#include <filesystem>
#include <string>

namespace cohort::core::store {

namespace fs = std::filesystem;

// <store>/cluster/credentials.json: the cluster's CURVE keys, written by the net layer (mode 0600).
fs::path credentials_path(const fs::path& store_dir);
fs::path cluster_dir(const fs::path& store_dir);  // <store>/cluster
fs::path leader_path(const fs::path& store_dir);  // <store>/cluster/leader.json
fs::path epochs_dir(const fs::path& store_dir);   // <store>/cluster/epochs (one claim per epoch)
fs::path next_job_id_path(const fs::path& store_dir);  // <store>/cluster/next_job_id
fs::path jobs_dir(const fs::path& store_dir);          // <store>/jobs
fs::path nodes_dir(const fs::path& store_dir);         // <store>/nodes

// Throws store_error(invalid) unless `name` is 1..128 characters of [A-Za-z0-9._-] and does not
// start with '.' (which would hide it from listings or climb out of the store).
void check_name(const std::string& what, const std::string& name);

}  // namespace cohort::core::store
