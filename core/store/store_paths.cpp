// Store layout (see store_paths.hpp).
#include "core/store/store_paths.hpp"

#include "core/store/store_error.hpp"

namespace cohort::core::store {

fs::path cluster_dir(const fs::path& store_dir) { return store_dir / "cluster"; }
fs::path credentials_path(const fs::path& store_dir) {
  return cluster_dir(store_dir) / "credentials.json";
}
fs::path leader_path(const fs::path& store_dir) { return cluster_dir(store_dir) / "leader.json"; }
fs::path epochs_dir(const fs::path& store_dir) { return cluster_dir(store_dir) / "epochs"; }
fs::path next_job_id_path(const fs::path& store_dir) {
  return cluster_dir(store_dir) / "next_job_id";
}
fs::path jobs_dir(const fs::path& store_dir) { return store_dir / "jobs"; }
fs::path nodes_dir(const fs::path& store_dir) { return store_dir / "nodes"; }

void check_name(const std::string& what, const std::string& name) {
  bool ok = !name.empty() && name.size() <= 128 && name[0] != '.';
  for (char c : name) {
    bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '.' || c == '_' || c == '-';
    ok = ok && allowed;
  }
  if (!ok)
    throw store_error(store_error_kind::invalid, "",
                      what + " '" + name +
                          "' is not a valid store name: use 1 to 128 characters of A-Z a-z 0-9 . _ "
                          "- not starting with '.'");
}

}  // namespace cohort::core::store
