// The cluster store: all cluster and job state of a head, so a restarted or standby head recovers
// the job table from it. A handle over one backend (store_backend.hpp states the contract of every
// call): a directory on shared storage (directory_store.hpp, the default and the embedded choice)
// or an etcd cluster (etcd_store.hpp). open_cluster_store picks one from a location.
// Not thread-safe: one owner per object (the head actor); separate objects, processes and hosts
// coordinate through the backend.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "core/store/store_backend.hpp"

namespace cohort::core::store {

class cluster_store {
 public:
  // Opens the store at `location`: an etcd store for "etcd://..." (etcd_store.hpp), else the
  // directory store there (creating its directories). Throws store_error invalid naming what is
  // wrong with a bad etcd location.
  explicit cluster_store(std::filesystem::path location, store_options options = {},
                         clock_ms now = system_clock_ms);
  // Over any backend (non-null).
  explicit cluster_store(std::unique_ptr<store_backend> backend);

  // Where the store lives ("/shared/store", "etcd://h1:2379/cohort").
  std::string location() const { return backend_->location(); }
  // The same as a path: what the constructor takes to open this store again.
  const std::filesystem::path& dir() const { return location_; }
  // What this object was opened with: another object on the same store (another thread's
  // owner) opens it the same way: cluster_store(dir(), options(), clock()).
  const store_options& options() const { return backend_->options(); }
  const clock_ms& clock() const { return backend_->clock(); }
  // The leader lease of this store; what fence checks compare against.
  lease_service& lease() { return backend_->lease(); }
  const lease_service& lease() const { return backend_->lease(); }
  store_backend& backend() { return *backend_; }

  std::string create_job(std::int64_t epoch, const std::string& spec_json) {
    return backend_->create_job(epoch, spec_json);
  }
  std::string reserve_job_id(std::int64_t epoch) { return backend_->reserve_job_id(epoch); }
  void create_reserved_job(std::int64_t epoch, const std::string& job_id, const std::string& spec_json) {
    backend_->create_reserved_job(epoch, job_id, spec_json);
  }
  void write_state(std::int64_t epoch, const std::string& job_id, const nlohmann::json& state) {
    backend_->write_state(epoch, job_id, state);
  }
  void append_event(std::int64_t epoch, const std::string& job_id, nlohmann::json event) {
    backend_->append_event(epoch, job_id, std::move(event));
  }
  void append_logs(std::int64_t epoch, const std::string& job_id,
                   std::vector<nlohmann::json> lines) {
    backend_->append_logs(epoch, job_id, std::move(lines));
  }
  std::vector<stored_job> list_jobs() const { return backend_->list_jobs(); }
  std::optional<stored_job> load_job(const std::string& job_id) const {
    return backend_->load_job(job_id);
  }
  std::vector<nlohmann::json> read_events(const std::string& job_id) const {
    return backend_->read_events(job_id);
  }
  std::vector<nlohmann::json> read_logs(const std::string& job_id,
                                        std::int64_t after_seq = 0) const {
    return backend_->read_logs(job_id, after_seq);
  }
  void write_node(std::int64_t epoch, const std::string& name, const nlohmann::json& node) {
    backend_->write_node(epoch, name, node);
  }
  void remove_node(std::int64_t epoch, const std::string& name) {
    backend_->remove_node(epoch, name);
  }
  std::vector<nlohmann::json> list_nodes() const { return backend_->list_nodes(); }

 private:
  std::unique_ptr<store_backend> backend_;
  std::filesystem::path location_;
};

// Whether `location` names an etcd store ("etcd://...") rather than a directory.
bool is_etcd_location(const std::string& location);
// Opens the store at `location`: "etcd://HOST:PORT[,HOST:PORT...][/prefix]" (etcd_store.hpp),
// anything else a directory. Throws store_error invalid naming what is wrong with a bad location.
std::shared_ptr<cluster_store> open_cluster_store(const std::string& location,
                                                  store_options options = {},
                                                  clock_ms now = system_clock_ms);

}  // namespace cohort::core::store
